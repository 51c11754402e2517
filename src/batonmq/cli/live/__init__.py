"""batonctl's live commands: a running broker administered over its management HTTP API
(`client`), shown as tables (`tables`) and rates (`rates`). The commands by what they act on:
the broker as a whole (`node`), its queues, connections and other objects (`objects`), its
definitions (`definitions`), and its users and virtual hosts (`accounts`)."""
