window.YTD.account.part0 = [
  {
    "account" : {
      "email" : "me@micahrl.com",
      "createdVia" : "web",
      "username" : "mrled",
      "accountId" : "35010911",
      "createdAt" : "2009-04-24T19:18:20.000Z",
      "accountDisplayName" : "Micah R Ledbetter /mɹ̩ˈled/"
    }
  }
]