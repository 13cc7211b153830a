// The Propose form checked as you type: after a pause, the form's fields go to the console's
// check route (the same check as the submit), and the errors beside each field, the ε sentence
// and the draft's JSON are rewritten from its answer — as text only (textContent), never markup.
// Without JavaScript the form's Check button does the same by reloading the page.
"use strict";
(function () {
  var timer = null, seq = 0;
  function show(form, doc) {
    form.querySelectorAll("[data-error-for]").forEach(function (el) {
      var msgs = doc.errors[el.getAttribute("data-error-for")] || [];
      el.textContent = msgs.join("; ");
      el.hidden = msgs.length === 0;
    });
    var sentence = document.getElementById("eps-sentence");
    if (sentence) {
      sentence.textContent = doc.sentence ? "What a peer reads: " + doc.sentence
        : "Type an ε in (0, 20] to see what a peer reads.";
    }
    var json = document.getElementById("draft-json");
    if (json && doc.json) { json.textContent = doc.json; }
    var state = document.getElementById("check-state");
    if (state) { state.textContent = doc.ok ? "valid" : "not valid yet"; }
    var shown = Array.prototype.map.call(form.querySelectorAll("#features input[type=checkbox]"),
      function (el) { return el.name.slice("feature.".length); });
    var stale = document.getElementById("features-stale");
    if (stale) { stale.hidden = shown.join("\n") === (doc.features || []).join("\n"); }
  }
  function check(form) {
    var mine = ++seq;
    var body = new URLSearchParams(new FormData(form));
    fetch(form.getAttribute("data-check"), {
      method: "POST", credentials: "same-origin", body: body,
      headers: { "Accept": "application/json" }
    }).then(function (r) { return r.ok ? r.json() : null; })
      .then(function (doc) { if (doc && mine === seq) { show(form, doc); } })
      .catch(function () { /* the submit checks again */ });
  }
  // A field edited before this deferred script ran (a slow load: the form is usable as soon as it
  // is parsed) fired its input event with no listener yet: check such a form at once.
  function edited(form) {
    return Array.prototype.some.call(form.elements, function (el) {
      if (el.type === "checkbox" || el.type === "radio") { return el.checked !== el.defaultChecked; }
      return "defaultValue" in el && el.type !== "hidden" && el.value !== el.defaultValue;
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("propose-form");
    if (!form) { return; }
    form.addEventListener("input", function () {
      if (timer) { clearTimeout(timer); }
      timer = setTimeout(function () { check(form); }, 250);
    });
    if (edited(form)) { check(form); }
  });
})();
