// Exchanges and bindings: the exchanges of the visible virtual hosts (declare, delete), and
// every binding (bind a queue or exchange, unbind), as the Qpid management console's
// exchange views and RabbitMQ's exchange pages offer them.

import * as api from "../api.js";
import { act, field, h, replace, select, table, yesNo } from "../dom.js";
import { exchangeLabel, exchangePathName, queueLink, vhostNames } from "./common.js";

export async function show(container) {
  const exchangesList = h("div");
  const bindingsList = h("div");

  async function refresh() {
    const [exchanges, bindings] = await Promise.all([api.get("/api/exchanges"), api.get("/api/bindings")]);
    replace(
      exchangesList,
      table({
        columns: [
          { key: "name", label: "Name", render: (row) => exchangeLabel(row.name) },
          { key: "vhost", label: "Virtual host" },
          { key: "type", label: "Type" },
          { key: "durable", label: "Durable", render: (row) => yesNo(row.durable) },
          { key: "auto_delete", label: "Auto-delete", render: (row) => yesNo(row.auto_delete) },
          { key: "internal", label: "Internal", render: (row) => yesNo(row.internal) },
          {
            key: "delete",
            label: "",
            render: (row) =>
              row.name === "" || row.name.startsWith("amq.")
                ? ""
                : h("button", { type: "button", class: "danger", onclick: () => removeExchange(row) }, "Delete"),
          },
        ],
        rows: exchanges,
      }),
    );
    replace(
      bindingsList,
      table({
        columns: [
          { key: "vhost", label: "Virtual host" },
          { key: "source", label: "From", render: (row) => exchangeLabel(row.source) },
          {
            key: "destination",
            label: "To",
            render: (row) =>
              row.destination_type === "queue" ? queueLink(row.vhost, row.destination) : `exchange ${row.destination}`,
          },
          { key: "routing_key", label: "Routing key" },
          { key: "arguments", label: "Arguments", render: (row) => JSON.stringify(row.arguments) },
          {
            key: "unbind",
            label: "",
            render: (row) =>
              row.source === "" ? "" : h("button", { type: "button", onclick: () => unbind(row) }, "Unbind"),
          },
        ],
        rows: bindings,
      }),
    );
  }

  function removeExchange(row) {
    if (!confirm(`Delete exchange ${row.name}?`)) return;
    act(async () => {
      await api.del(api.path`/api/exchanges/${row.vhost}/${row.name}`);
      await refresh();
    }, `Exchange ${row.name} deleted`);
  }

  function unbind(row) {
    const kind = row.destination_type === "queue" ? "q" : "e";
    act(async () => {
      await api.del(
        api.path`/api/bindings/${row.vhost}/e/${exchangePathName(row.source)}/` +
          `${kind}/${encodeURIComponent(row.destination)}/${encodeURIComponent(row.properties_key)}`,
      );
      await refresh();
    }, "Unbound");
  }

  const vhosts = await vhostNames();
  const vhostChoice = () => select("vhost", vhosts, vhosts.includes("/") ? "/" : vhosts[0]);
  const addExchange = h(
    "form",
    {
      onsubmit: (event) => {
        event.preventDefault();
        const values = event.target.elements;
        const name = values.name.value;
        act(async () => {
          await api.put(api.path`/api/exchanges/${values.vhost.value}/${name}`, {
            type: values.type.value,
            durable: values.durable.checked,
            auto_delete: false,
            internal: false,
            arguments: {},
          });
          values.name.value = "";
          await refresh();
        }, `Exchange ${name} declared`);
      },
    },
    h(
      "fieldset",
      {},
      h("legend", {}, "Add an exchange"),
      field("Virtual host", vhostChoice()),
      field("Name", h("input", { name: "name", required: true })),
      field("Type", select("type", ["direct", "fanout", "topic", "headers"], "direct")),
      field("Durable", h("input", { name: "durable", type: "checkbox", checked: true })),
      h("button", { type: "submit" }, "Add exchange"),
    ),
  );
  const addBinding = h(
    "form",
    {
      onsubmit: (event) => {
        event.preventDefault();
        const values = event.target.elements;
        act(async () => {
          await api.post(
            api.path`/api/bindings/${values.vhost.value}/e/${values.source.value}/` +
              `${values.kind.value}/${encodeURIComponent(values.destination.value)}`,
            { routing_key: values.routing_key.value, arguments: {} },
          );
          await refresh();
        }, "Bound");
      },
    },
    h(
      "fieldset",
      {},
      h("legend", {}, "Add a binding"),
      field("Virtual host", vhostChoice()),
      field("From exchange", h("input", { name: "source", required: true })),
      field("To", select("kind", [["q", "queue"], ["e", "exchange"]], "q")),
      field("Named", h("input", { name: "destination", required: true })),
      field("Routing key", h("input", { name: "routing_key" })),
      h("button", { type: "submit" }, "Bind"),
    ),
  );

  replace(
    container,
    h("h2", {}, "Exchanges"),
    exchangesList,
    addExchange,
    h("h2", {}, "Bindings"),
    bindingsList,
    addBinding,
  );
  await refresh();
  return { refresh };
}
