// Connections and channels; an administrator (or the connection's own user) may close a
// connection, with a reason the client is told (RabbitMQ's X-Reason, 320 CONNECTION_FORCED).

import * as api from "../api.js";
import { act, bytes, h, replace, table } from "../dom.js";

export async function show(container) {
  const connectionsList = h("div");
  const channelsList = h("div");

  async function refresh() {
    const [connections, channels] = await Promise.all([api.get("/api/connections"), api.get("/api/channels")]);
    replace(
      connectionsList,
      table({
        columns: [
          { key: "name", label: "Name" },
          { key: "user", label: "User" },
          { key: "vhost", label: "Virtual host" },
          {
            key: "client",
            label: "Client",
            render: (row) => [row.client_properties?.product, row.client_properties?.version].filter(Boolean).join(" "),
          },
          { key: "channels", label: "Channels", number: true },
          { key: "recv_oct", label: "Received", number: true, render: (row) => bytes(row.recv_oct) },
          { key: "send_oct", label: "Sent", number: true, render: (row) => bytes(row.send_oct) },
          {
            key: "close",
            label: "",
            render: (row) =>
              h("button", { type: "button", class: "danger", onclick: () => close(row.name) }, "Close"),
          },
        ],
        rows: connections,
        empty: "No connections",
        rowProps: (row) => ({ "data-connection": row.name }),
      }),
    );
    replace(
      channelsList,
      table({
        columns: [
          { key: "name", label: "Channel" },
          { key: "user", label: "User" },
          { key: "vhost", label: "Virtual host" },
          { key: "consumer_count", label: "Consumers", number: true },
          { key: "prefetch_count", label: "Prefetch", number: true },
          { key: "messages_unacknowledged", label: "Unacked", number: true },
          { key: "publish", label: "Published", number: true, render: (row) => row.message_stats.publish },
          { key: "deliver", label: "Delivered", number: true, render: (row) => row.message_stats.deliver_get },
          { key: "ack", label: "Acked", number: true, render: (row) => row.message_stats.ack },
        ],
        rows: channels,
        empty: "No channels",
      }),
    );
  }

  function close(name) {
    const reason = prompt(`Close connection ${name}: the reason the client is told`, "Closed via web console");
    if (reason === null) return;
    act(async () => {
      await api.del(api.path`/api/connections/${name}`, { headers: { "X-Reason": reason } });
      await refresh();
    }, `Connection ${name} closed`);
  }

  replace(container, h("h2", {}, "Connections"), connectionsList, h("h2", {}, "Channels"), channelsList);
  await refresh();
  return { refresh };
}
