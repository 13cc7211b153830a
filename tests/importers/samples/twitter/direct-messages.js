window.YTD.direct_messages.part0 = [
  {
    "dmConversation" : {
      "conversationId" : "2815014648-1964312974236991488",
      "messages" : [
        {
          "messageCreate" : {
            "recipientId" : "2815014648",
            "reactions" : [ ],
            "urls" : [ ],
            "text" : "hey. wanna read my book? my post-apocalypse vision of a realistic paradise on earth...",
            "mediaUrls" : [ ],
            "senderId" : "1964312974236991488",
            "id" : "2015508318568001704",
            "createdAt" : "2026-01-25T19:33:24.183Z",
            "editHistory" : [ ]
          }
        }
      ]
    }
  },
  {
    "dmConversation" : {
      "conversationId" : "2846154391-1964312974236991488",
      "messages" : [
        {
          "messageCreate" : {
            "recipientId" : "2846154391",
            "reactions" : [ ],
            "urls" : [ ],
            "text" : "hey, thanks for the reply.\n\n\"It takes time and effort\" -- yep, i have already spent about 5 years and 20.000 euros on this project, and i still have zero feedback. so i am always looking for \"multiplicators\" to promote my project. me paying money for such a promotion is my way to prove that i am serious about this.\n\nif my hypothesis is true, then i have found a solution to build \"paradise on earth\" (stable groups, tribalism, self-organization, village culture, decentralization)... but maybe my hypothesis is false, then my project is a waste of time.\n\ncompared to europe, mexico sounds like a place that will be livable in the near future (western europe will collapse in the next months) (if i had more money, i would emigrate to south america, i guess only 10.000 euros wont be enough)",
            "mediaUrls" : [ ],
            "senderId" : "1964312974236991488",
            "id" : "2022395501518229939",
            "createdAt" : "2026-02-13T19:40:36.589Z",
            "editHistory" : [ ]
          }
        },
        {
          "messageCreate" : {
            "recipientId" : "1964312974236991488",
            "reactions" : [ ],
            "urls" : [ ],
            "text" : "If you're interested in learning more about Mexico, click the link we sent you. That's also the fastest way to get in touch with Jeckov personally.🙏",
            "mediaUrls" : [ ],
            "senderId" : "2846154391",
            "id" : "2020990639995806191",
            "createdAt" : "2026-02-09T22:38:11.458Z",
            "editHistory" : [ ]
          }
        },
        {
          "messageCreate" : {
            "recipientId" : "1964312974236991488",
            "reactions" : [ ],
            "urls" : [ ],
            "text" : "Hola Milan 👋 \n\nThis is Stas, Jeckov's assistant at the moment. \nI'm sorry to hear that. It takes time and effort. It's definitely not the easiest way but think about other ways of promotion...",
            "mediaUrls" : [ ],
            "senderId" : "2846154391",
            "id" : "2020990449125622068",
            "createdAt" : "2026-02-09T22:37:25.955Z",
            "editHistory" : [ ]
          }
        },
        {
          "messageCreate" : {
            "recipientId" : "2846154391",
            "reactions" : [ ],
            "urls" : [
              {
                "url" : "https://t.co/aJdIgtGM85",
                "expanded" : "https://milahu.github.io/alchi/src/whoaremyfriends/whoaremyfriends.html",
                "display" : "milahu.github.io/alchi/src/whoa…"
              }
            ],
            "text" : "sweet. i am buying attention for my book:\n\nPallas. Who are my friends. Group composition by personality type\nhttps://t.co/aJdIgtGM85\n\nideas?\ncurrently i print my book and send it by snail mail to random people in germany, but this is frustrating, after 12K books i still have zero feedback... mainstream \"researchers\" seem to ignore my thesis as \"too radical\"",
            "mediaUrls" : [ ],
            "senderId" : "1964312974236991488",
            "id" : "2020795263707705542",
            "createdAt" : "2026-02-09T09:41:50.152Z",
            "editHistory" : [ ]
          }
        },
        {
          "messageCreate" : {
            "recipientId" : "1964312974236991488",
            "reactions" : [ ],
            "urls" : [
              {
                "url" : "https://t.co/Q5JqxDYpiP",
                "expanded" : "https://escapethematrix.vip/mexico",
                "display" : "escapethematrix.vip/mexico"
              }
            ],
            "text" : "Habibi,\n\nAfter losing my business, my house, and every dollar I’d saved during the pandemic, I packed two suitcases and moved to Mexico.\n\nMexico didn’t just save my life — it gave me one worth living 🇲🇽\n\nCurious how? Click the link to learn how Mexico can change your life, too. \n\nText me: +1-844-699-1844\n\nhttps://t.co/Q5JqxDYpiP",
            "mediaUrls" : [ ],
            "senderId" : "2846154391",
            "id" : "2020794244168839651",
            "createdAt" : "2026-02-09T09:37:47.064Z",
            "editHistory" : [ ]
          }
        }
      ]
    }
  },
  {
    "dmConversation" : {
      "conversationId" : "3824124982-1964312974236991488",
      "messages" : [
        {
          "messageCreate" : {
            "recipientId" : "3824124982",
            "reactions" : [ ],
            "urls" : [
              {
                "url" : "https://t.co/SQXiROiLqW",
                "expanded" : "https://www.youtube.com/watch?v=7E8OO7V8qmk",
                "display" : "youtube.com/watch?v=7E8OO7…"
              }
            ],
            "text" : "deindustrialisierung ist kein \"dummer zufall von dummen politikern\"\nsondern deindustrialisierung ist 100% geplant von der elite\n\nhttps://t.co/SQXiROiLqW\nTom Lausen packt aus: „Das alte System ist ERLEDIGT!“ - Das kommt JETZT! (KI, Roboter &amp; Haftung)\n\n6:32 Also zunächst einmal ist klar, dieses System wird gerade abgerissen.\n10:24 Es ist ein neues gewolltes System, in das bereits sehr, sehr viel Geld geflossen ist.\n11:39 wir haben künstliche Intelligenz. Jetzt kommt die Robotik sichtbar in 2026 dazu.\n12:18 Und der Abriss ist natürlich auch immer verbunden mit all dem, was wir jetzt wahrnehmen. Arbeitsplatzverluste, die aber nicht zwingend aufgrund der Tatsache entstehen, dass da neue Technologien kommen, sondern aufgrund dieses Systems, das im Abrissmodus sich auch befindet.\n12:40 politische Entscheidungen ... Nordstream 2 ist ja ein Einschnitt in der deutschen und europäischen Energieversorgung zum Erzeugen von Strom beispielsweise. Dadurch wird natürlich der Strom teurer und wenn der Strom teurer wird, dann ist das Industrie und produzierende Gewerbe nicht mehr in der Lage konkurrenzfähig zu produzieren. Und das macht natürlich die Lage auf dem Arbeitsmarkt besonders schwer, weil wer nicht mehr konkurrenzfähig produziert, dessen Produkte werden nicht mehr abgenommen.\n13:36 wir befinden uns an diesem spannenden Punkt des Übergangs zu vom einem zum anderen System\n34:50 das neue System kommt, es wird vorbereitet, aber die Menschen werden es nicht wollen.\n35:42 es passiert einfach, dass dann ein Krieg immer der Trenner ist, von einem System zum nächsten.\n35:55 schwelender Krieg in der Ukraine\n36:28 oder dass es wirklich einen Krieg gibt, der eskaliert, um eben die Menschen, die dann noch da sind dazu zu bringen, zu sagen, ja, das neue System wollen wir, weil damit kann das alles nicht mehr passieren.\n40:00 die ganzen Arbeitsplätze wegfallen ... wie werden diese Menschen dann leben nach der Übergangszeit? Und dann wird es wahrscheinlich ein sehr üppiges Grundeinkommen für alle geben. Und dieses üppige Grundeinkommen ist natürlich notwendig, damit die Menschen dagegen nicht rebellieren.\n43:34 Grundrecht für analoge Freiheit\n\n... und auch die \"global depopulation agenda\" ist sicher nicht nur eine verschwörungstheorie, sondern das läuft hier und jetzt, und das hängt ja auch zusammen mit dem \"vorsätzlichen systemabriss\"\nquellen: Michael Yon, Christian Westbrook (Ice Age Farmer)",
            "mediaUrls" : [ ],
            "senderId" : "1964312974236991488",
            "id" : "2009751098190373044",
            "createdAt" : "2026-01-09T22:16:15.992Z",
            "editHistory" : [ ]
          }
        }
      ]
    }
  },
  {
    "dmConversation" : {
      "conversationId" : "810957560723505152-1964312974236991488",
      "messages" : [
        {
          "messageCreate" : {
            "recipientId" : "810957560723505152",
            "reactions" : [ ],
            "urls" : [ ],
            "text" : "kaufe werbung für mein buch",
            "mediaUrls" : [ ],
            "senderId" : "1964312974236991488",
            "id" : "2013726735666213338",
            "createdAt" : "2026-01-20T21:34:01.806Z",
            "editHistory" : [ ]
          }
        }
      ]
    }
  },
  {
    "dmConversation" : {
      "conversationId" : "830858867789664257-1964312974236991488",
      "messages" : [
        {
          "messageCreate" : {
            "recipientId" : "830858867789664257",
            "reactions" : [ ],
            "urls" : [ ],
            "text" : "kaufe werbung für mein buch",
            "mediaUrls" : [ ],
            "senderId" : "1964312974236991488",
            "id" : "2011451916996284623",
            "createdAt" : "2026-01-14T14:54:42.784Z",
            "editHistory" : [ ]
          }
        }
      ]
    }
  },
  {
    "dmConversation" : {
      "conversationId" : "975686023907872769-1964312974236991488",
      "messages" : [
        {
          "messageCreate" : {
            "recipientId" : "975686023907872769",
            "reactions" : [ ],
            "urls" : [ ],
            "text" : "kaufe werbung für mein buch...",
            "mediaUrls" : [ ],
            "senderId" : "1964312974236991488",
            "id" : "2011438452349313157",
            "createdAt" : "2026-01-14T14:01:12.569Z",
            "editHistory" : [ ]
          }
        }
      ]
    }
  },
  {
    "dmConversation" : {
      "conversationId" : "1128502412543758337-1964312974236991488",
      "messages" : [
        {
          "messageCreate" : {
            "recipientId" : "1128502412543758337",
            "reactions" : [ ],
            "urls" : [ ],
            "text" : "buying attention for my book...",
            "mediaUrls" : [ ],
            "senderId" : "1964312974236991488",
            "id" : "2012999238049738940",
            "createdAt" : "2026-01-18T21:23:12.894Z",
            "editHistory" : [ ]
          }
        }
      ]
    }
  },
  {
    "dmConversation" : {
      "conversationId" : "1442698504770555906-1964312974236991488",
      "messages" : [
        {
          "messageCreate" : {
            "recipientId" : "1964312974236991488",
            "reactions" : [ ],
            "urls" : [ ],
            "text" : "Der nächste Bitcoin?",
            "mediaUrls" : [ ],
            "senderId" : "1442698504770555906",
            "id" : "2017298134729429424",
            "createdAt" : "2026-01-30T18:05:29.594Z",
            "editHistory" : [ ]
          }
        },
        {
          "messageCreate" : {
            "recipientId" : "1442698504770555906",
            "reactions" : [ ],
            "urls" : [ ],
            "text" : "der nächste bitcoin ist mein buch : D",
            "mediaUrls" : [ ],
            "senderId" : "1964312974236991488",
            "id" : "2017229231176974422",
            "createdAt" : "2026-01-30T13:31:41.819Z",
            "editHistory" : [ ]
          }
        }
      ]
    }
  },
  {
    "dmConversation" : {
      "conversationId" : "1810052589754662912-1964312974236991488",
      "messages" : [
        {
          "messageCreate" : {
            "recipientId" : "1810052589754662912",
            "reactions" : [ ],
            "urls" : [ ],
            "text" : "kaufe werbung für mein buch",
            "mediaUrls" : [ ],
            "senderId" : "1964312974236991488",
            "id" : "2017229114084634986",
            "createdAt" : "2026-01-30T13:31:13.897Z",
            "editHistory" : [ ]
          }
        }
      ]
    }
  },
  {
    "dmConversation" : {
      "conversationId" : "1854478037913571328-1964312974236991488",
      "messages" : [
        {
          "messageCreate" : {
            "recipientId" : "1854478037913571328",
            "reactions" : [ ],
            "urls" : [ ],
            "text" : "ping",
            "mediaUrls" : [ ],
            "senderId" : "1964312974236991488",
            "id" : "2027078712223543754",
            "createdAt" : "2026-02-26T17:50:01.004Z"
          }
        },
        {
          "messageCreate" : {
            "recipientId" : "1854478037913571328",
            "reactions" : [ ],
            "urls" : [ ],
            "text" : "ping",
            "mediaUrls" : [ ],
            "senderId" : "1964312974236991488",
            "id" : "2019333031526310254",
            "createdAt" : "2026-02-05T08:51:26.806Z",
            "editHistory" : [ ]
          }
        },
        {
          "messageCreate" : {
            "recipientId" : "1854478037913571328",
            "reactions" : [ ],
            "urls" : [ ],
            "text" : "hey",
            "mediaUrls" : [ ],
            "senderId" : "1964312974236991488",
            "id" : "2019328694733377833",
            "createdAt" : "2026-02-05T08:34:12.934Z",
            "editHistory" : [ ]
          }
        }
      ]
    }
  }
]