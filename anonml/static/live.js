// Live updates without reloading: every element with data-poll="URL" is refreshed from
// that URL's JSON, {"items": {key: {field: text}}, "reload": bool, "charts": version}, once a second.
// Only text is written (textContent), never markup. A key the page does not show yet,
// or "reload": true, reloads the page once. Once a form is submitted the polling stops: a
// reload then would race the form's own navigation (and could take the outcome it shows).
"use strict";
(function () {
  var leaving = false;
  function apply(root, doc) {
    if (leaving) { return false; }
    if (doc.reload) { window.location.reload(); return false; }
    var items = doc.items || {};
    for (var key in items) {
      // A key is looked up in the polled element first, then in the whole page (the console's chart
      // captions sit in their own section but come with the counts).
      var selector = '[data-key="' + CSS.escape(key) + '"]';
      var row = root.querySelector(selector) || document.querySelector(selector);
      if (!row) { window.location.reload(); return false; }
      var fields = items[key];
      for (var name in fields) {
        var cell = row.querySelector('[data-field="' + CSS.escape(name) + '"]');
        if (cell && cell.textContent !== String(fields[name])) {
          cell.textContent = String(fields[name]);
          cell.setAttribute("data-value", String(fields[name]));
        }
      }
    }
    // Charts drawn by the server as images: reloaded (a new query, same address) when a count changed.
    if (doc.charts !== undefined && doc.charts !== root.getAttribute("data-charts")) {
      if (root.hasAttribute("data-charts")) {
        document.querySelectorAll("img[data-chart]").forEach(function (img) {
          img.src = img.src.split("?")[0] + "?v=" + encodeURIComponent(doc.charts);
        });
      }
      root.setAttribute("data-charts", doc.charts);
    }
    return true;
  }
  function poll(root) {
    if (leaving) { return; }
    var url = root.getAttribute("data-poll");
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) {
        if (r.status === 401) { if (!leaving) { window.location.reload(); } return null; }
        return r.json();
      })
      .then(function (doc) { if (doc && apply(root, doc)) { setTimeout(function () { poll(root); }, 1000); } })
      .catch(function () { setTimeout(function () { poll(root); }, 3000); });
  }
  // Countdowns: every element with data-deadline="POSIX seconds" says how far it is, each second,
  // in the words the server wrote it with (anonml.web.countdown).
  function two(n) { return (n < 10 ? "0" : "") + n; }
  function countdown(at) {
    var seconds = Math.round(at - Date.now() / 1000), span = Math.abs(seconds);
    var h = Math.floor(span / 3600), m = Math.floor((span % 3600) / 60), s = span % 60;
    var text = h ? h + " h " + two(m) + " min" : (m ? m + " min " + two(s) + " s" : s + " s");
    return seconds > 0 ? "in " + text : (seconds === 0 ? "now" : text + " ago");
  }
  function tick() {
    document.querySelectorAll("[data-deadline]").forEach(function (el) {
      var text = countdown(parseFloat(el.getAttribute("data-deadline")));
      if (el.textContent !== text) { el.textContent = text; }
    });
  }
  document.addEventListener("submit", function () { leaving = true; });
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-poll]").forEach(poll);
    if (document.querySelector("[data-deadline]")) { tick(); setInterval(tick, 1000); }
  });
})();
