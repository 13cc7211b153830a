window.YTD.tweet.part0 = [
  {
    "tweet" : {
      "retweeted" : false,
      "source" : "<a href=\"http://twitter.com/download/iphone\" rel=\"nofollow\">Twitter for iPhone</a>",
      "entities" : {
        "hashtags" : [ ],
        "symbols" : [ ],
        "user_mentions" : [
          {
            "name" : "nostrich",
            "screen_name" : "nostrich",
            "indices" : [
              "3",
              "12"
            ],
            "id_str" : "626183",
            "id" : "626183"
          }
        ],
        "urls" : [ ]
      },
      "display_text_range" : [
        "0",
        "103"
      ],
      "favorite_count" : "0",
      "id_str" : "254848497235398656",
      "truncated" : false,
      "retweet_count" : "0",
      "id" : "254848497235398656",
      "created_at" : "Sun Oct 07 07:39:51 +0000 2012",
      "favorited" : false,
      "full_text" : "RT @nostrich: 2012 is about correcting the typo on the 3 different social networks you cross-posted to.",
      "lang" : "en"
    }
  },
  {
    "tweet" : {
      "retweeted" : false,
      "source" : "<a href=\"https://mobile.twitter.com\" rel=\"nofollow\">Twitter Web App</a>",
      "entities" : {
        "hashtags" : [ ],
        "symbols" : [ ],
        "user_mentions" : [
          {
            "name" : "Syncthing",
            "screen_name" : "syncthing",
            "indices" : [
              "13",
              "23"
            ],
            "id_str" : "2717302468",
            "id" : "2717302468"
          }
        ],
        "urls" : [ ]
      },
      "display_text_range" : [
        "0",
        "219"
      ],
      "favorite_count" : "2",
      "id_str" : "1276916896974110721",
      "truncated" : false,
      "retweet_count" : "0",
      "id" : "1276916896974110721",
      "created_at" : "Sat Jun 27 16:34:46 +0000 2020",
      "favorited" : false,
      "full_text" : "I just found @syncthing and I'm really liking it so far. It's a really cool peer to peer syncing system, implemented so that your data is only ever on your own devices, and it's encrypted when transferring between them.",
      "lang" : "en"
    }
  }
]