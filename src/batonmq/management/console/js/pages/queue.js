// One queue: its figures, pause / resume / purge / delete, and its messages as the Qpid
// broker manual's management console offers them (browse a range by position, then move,
// copy or delete the selected messages), RabbitMQ's "Get messages" and "Publish message",
// and its bindings.

import * as api from "../api.js";
import { act, bytes, facts, field, h, number, replace, select, table, yesNo } from "../dom.js";
import { exchangeLabel, exchangePathName, rate } from "./common.js";

export async function show(container, [vhost, name]) {
  const base = api.path`/api/queues/${vhost}/${name}`;
  const figures = h("div", { class: "figures" });
  const controls = h("div", { class: "toolbar" });

  async function refresh() {
    const info = await api.get(base);
    replace(
      figures,
      facts([
        ["Virtual host", info.vhost],
        ["Type", info.type],
        ["State", info.paused ? "paused" : info.state],
        ["Durable", yesNo(info.durable)],
        ["Auto-delete", yesNo(info.auto_delete)],
        ["Exclusive", yesNo(info.exclusive)],
        ["Consumers", number(info.consumers)],
        ["Messages ready", number(info.messages_ready)],
        ["Messages unacknowledged", number(info.messages_unacknowledged)],
        ["Messages", number(info.messages)],
        ["Published /s", rate(info.message_stats, "publish").toFixed(1)],
        ["Delivered and got /s", rate(info.message_stats, "deliver_get").toFixed(1)],
        ["Acknowledged /s", rate(info.message_stats, "ack").toFixed(1)],
        ["Memory (estimate)", bytes(info.memory)],
        ["Arguments", JSON.stringify(info.arguments)],
      ]),
    );
    replace(
      controls,
      h(
        "button",
        { type: "button", onclick: () => act(() => pause(!info.paused), info.paused ? "Delivery resumed" : "Delivery paused") },
        info.paused ? "Resume delivery" : "Pause delivery",
      ),
      h("button", { type: "button", class: "danger", onclick: purge }, "Purge"),
      h("button", { type: "button", class: "danger", onclick: remove }, "Delete queue"),
    );
  }

  async function pause(paused) {
    await api.put(`${base}/${paused ? "pause" : "resume"}`);
    await refresh();
  }

  function purge() {
    if (!confirm(`Purge every ready message of queue ${name}?`)) return;
    act(async () => {
      await api.del(`${base}/contents`);
      await Promise.all([refresh(), messages.load()]);
    }, `Queue ${name} purged`);
  }

  function remove() {
    if (!confirm(`Delete queue ${name}?`)) return;
    act(async () => {
      await api.del(base);
      location.hash = "#/queues";
    }, `Queue ${name} deleted`);
  }

  const messages = messagesSection(base, vhost, name, refresh);
  replace(
    container,
    h("h2", {}, `Queue ${name}`),
    figures,
    controls,
    messages.element,
    getSection(base, refresh),
    publishSection(vhost, name, refresh),
    bindingsSection(base, vhost, name),
  );
  await Promise.all([refresh(), messages.load()]);
  return { refresh };
}

// Browse by position (the next message out is position 0), select, move / copy / delete.
function messagesSection(base, vhost, name, refreshQueue) {
  const range = { start: 0, count: 50 };
  const selected = new Set();
  const listing = h("div");
  const detail = h("div", { class: "message-detail" });
  const target = h("select", { name: "target" });
  const start = h("input", { name: "start", type: "number", min: 0, value: range.start, size: 6 });
  const count = h("input", { name: "count", type: "number", min: 1, value: range.count, size: 6 });

  async function load() {
    const [browsed, queues] = await Promise.all([
      api.get(`${base}/messages${api.query({ start: range.start, count: range.count, truncate: 2000 })}`),
      api.get(`${api.path`/api/queues/${vhost}`}${api.query({ columns: "name" })}`),
    ]);
    const present = new Set(browsed.map((message) => message.message_id));
    for (const id of [...selected]) if (!present.has(id)) selected.delete(id);
    const previousTarget = target.value;
    replace(
      target,
      queues.filter((queue) => queue.name !== name).map((queue) => h("option", { value: queue.name }, queue.name)),
    );
    if (previousTarget) target.value = previousTarget;
    replace(
      listing,
      table({
        columns: [
          {
            key: "select",
            label: "",
            render: (message) =>
              h("input", {
                type: "checkbox",
                "aria-label": `Select message ${message.message_id}`,
                checked: selected.has(message.message_id),
                onchange: (event) => {
                  if (event.target.checked) selected.add(message.message_id);
                  else selected.delete(message.message_id);
                },
              }),
          },
          { key: "position", label: "Position", number: true },
          { key: "message_id", label: "Message id", number: true },
          { key: "routing_key", label: "Routing key" },
          { key: "exchange", label: "Exchange", render: (message) => exchangeLabel(message.exchange) },
          { key: "redelivered", label: "Redelivered", render: (message) => yesNo(message.redelivered) },
          { key: "payload_bytes", label: "Size", number: true, render: (message) => bytes(message.payload_bytes) },
          { key: "payload", label: "Payload", class: "payload", render: payloadText },
          {
            key: "show",
            label: "",
            render: (message) => h("button", { type: "button", onclick: () => showMessage(detail, message) }, "Properties"),
          },
        ],
        rows: browsed,
        empty: "No messages in this range",
        rowProps: (message) => ({ "data-message-id": message.message_id }),
      }),
    );
  }

  function move(by) {
    range.start = Math.max(0, range.start + by * range.count);
    start.value = range.start;
    act(load);
  }

  async function transfer(kind) {
    const ids = [...selected];
    if (!ids.length) throw new Error("Select messages first");
    if (!target.value) throw new Error("There is no other queue in this virtual host");
    const answer = await api.post(`${base}/messages/${kind}`, { to: target.value, message_ids: ids });
    const done = answer[kind === "move" ? "moved" : "copied"];
    selected.clear();
    await Promise.all([load(), refreshQueue()]);
    return `${done.length} message${done.length === 1 ? "" : "s"} ${kind === "move" ? "moved" : "copied"} to ${target.value}` +
      (answer.missing.length ? ` (${answer.missing.length} no longer in the queue)` : "");
  }

  async function removeSelected() {
    const ids = [...selected];
    if (!ids.length) throw new Error("Select messages first");
    if (!confirm(`Delete ${ids.length} message(s) from queue ${name}?`)) return "Nothing deleted";
    const answer = await api.del(`${base}/messages`, { body: { message_ids: ids } });
    selected.clear();
    await Promise.all([load(), refreshQueue()]);
    return `${answer.deleted.length} message${answer.deleted.length === 1 ? "" : "s"} deleted`;
  }

  const element = h(
    "section",
    { class: "messages", "aria-label": "Messages" },
    h("h3", {}, "Messages"),
    h(
      "form",
      {
        class: "toolbar",
        onsubmit: (event) => {
          event.preventDefault();
          range.start = Math.max(0, Number(start.value) || 0);
          range.count = Math.max(1, Number(count.value) || 50);
          act(load);
        },
      },
      field("From position", start),
      field("Count", count),
      h("button", { type: "submit" }, "Browse"),
      h("button", { type: "button", onclick: () => move(-1) }, "‹ Previous"),
      h("button", { type: "button", onclick: () => move(1) }, "Next ›"),
    ),
    listing,
    h(
      "div",
      { class: "toolbar" },
      field("Selected messages to queue", target),
      h("button", { type: "button", onclick: () => act(() => transfer("move"), (text) => text) }, "Move"),
      h("button", { type: "button", onclick: () => act(() => transfer("copy"), (text) => text) }, "Copy"),
      h("button", { type: "button", class: "danger", onclick: () => act(removeSelected, (text) => text) }, "Delete selected"),
    ),
    detail,
  );
  return { element, load };
}

function payloadText(message) {
  const shown = message.payload_encoding === "base64" ? `(base64) ${message.payload}` : message.payload;
  return shown.length > 200 ? `${shown.slice(0, 200)}…` : shown;
}

function showMessage(detail, message) {
  replace(
    detail,
    h("h4", {}, `Message ${message.message_id ?? ""}`),
    facts([
      ["Exchange", exchangeLabel(message.exchange)],
      ["Routing key", message.routing_key],
      ["Redelivered", yesNo(message.redelivered)],
      ...Object.entries(message.properties).map(([key, value]) => [key, typeof value === "object" ? JSON.stringify(value) : String(value)]),
      ["Payload", h("span", { class: "payload" }, message.payload)],
    ]),
  );
}

// RabbitMQ's "Get messages": basic.get with an ack mode.
function getSection(base, refreshQueue) {
  const results = h("div", { class: "got" });
  return h(
    "section",
    { "aria-label": "Get messages" },
    h("h3", {}, "Get messages"),
    h(
      "form",
      {
        class: "toolbar",
        onsubmit: (event) => {
          event.preventDefault();
          const values = event.target.elements;
          act(async () => {
            const got = await api.post(`${base}/get`, {
              count: Number(values.count.value),
              ackmode: values.ackmode.value,
              encoding: values.encoding.value,
              truncate: values.truncate.value ? Number(values.truncate.value) : undefined,
            });
            replace(
              results,
              got.length
                ? got.map((message, index) =>
                    h(
                      "div",
                      { class: "got-message" },
                      h("h4", {}, `Message ${index + 1} (${message.message_count} left in the queue)`),
                      facts([
                        ["Exchange", exchangeLabel(message.exchange)],
                        ["Routing key", message.routing_key],
                        ["Redelivered", yesNo(message.redelivered)],
                        ["Properties", JSON.stringify(message.properties)],
                        ["Payload", h("span", { class: "payload" }, payloadText(message))],
                      ]),
                    ),
                  )
                : h("p", {}, "Queue is empty"),
            );
            await refreshQueue();
          });
        },
      },
      field(
        "Ack mode",
        select(
          "ackmode",
          [
            ["ack_requeue_true", "Nack message requeue true"],
            ["ack_requeue_false", "Automatic ack"],
            ["reject_requeue_true", "Reject requeue true"],
            ["reject_requeue_false", "Reject requeue false"],
          ],
          "ack_requeue_true",
        ),
      ),
      field("Encoding", select("encoding", [["auto", "Auto string / base64"], ["base64", "base64"]], "auto")),
      field("Messages", h("input", { name: "count", type: "number", min: 1, value: 1, size: 4 })),
      field("Truncate bytes", h("input", { name: "truncate", type: "number", min: 0, size: 6 })),
      h("button", { type: "submit" }, "Get messages"),
    ),
    results,
  );
}

// Headers as "name=value" lines.
function parseHeaders(text) {
  const headers = {};
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    const at = line.indexOf("=");
    if (at < 1) throw new Error(`A header is name=value: ${line}`);
    headers[line.slice(0, at).trim()] = line.slice(at + 1);
  }
  return headers;
}

// RabbitMQ's "Publish message", through the default exchange to this queue.
function publishSection(vhost, name, refreshQueue) {
  return h(
    "section",
    { "aria-label": "Publish message" },
    h("h3", {}, "Publish message"),
    h(
      "form",
      {
        onsubmit: (event) => {
          event.preventDefault();
          const values = event.target.elements;
          act(async () => {
            const properties = { delivery_mode: Number(values.delivery_mode.value), headers: parseHeaders(values.headers.value) };
            for (const key of ["content_type", "message_id", "correlation_id"]) {
              if (values[key].value) properties[key] = values[key].value;
            }
            const answer = await api.post(api.path`/api/exchanges/${vhost}/${exchangePathName("")}/publish`, {
              routing_key: values.routing_key.value,
              properties,
              payload: values.payload.value,
              payload_encoding: values.payload_encoding.value,
            });
            await refreshQueue();
            return answer.routed ? "Message published" : "Message published, but not routed";
          }, (text) => text);
        },
      },
      h(
        "fieldset",
        {},
        h("legend", {}, "Through the default exchange"),
        field("Routing key", h("input", { name: "routing_key", value: name })),
        field("Delivery mode", select("delivery_mode", [["1", "1 - non-persistent"], ["2", "2 - persistent"]], "2")),
        field("Content type", h("input", { name: "content_type" })),
        field("Message id", h("input", { name: "message_id" })),
        field("Correlation id", h("input", { name: "correlation_id" })),
        h("label", {}, "Headers (name=value, one a line)", h("textarea", { name: "headers", rows: 2 })),
        h("label", {}, "Payload", h("textarea", { name: "payload" })),
        field("Payload encoding", select("payload_encoding", [["string", "string"], ["base64", "base64"]], "string")),
        h("button", { type: "submit" }, "Publish message"),
      ),
    ),
  );
}

function bindingsSection(base, vhost, name) {
  const listing = h("div");
  async function load() {
    const bindings = await api.get(`${base}/bindings`);
    replace(
      listing,
      table({
        columns: [
          { key: "source", label: "From exchange", render: (binding) => exchangeLabel(binding.source) },
          { key: "routing_key", label: "Routing key" },
          { key: "arguments", label: "Arguments", render: (binding) => JSON.stringify(binding.arguments) },
          {
            key: "unbind",
            label: "",
            render: (binding) =>
              binding.source === ""
                ? ""
                : h(
                    "button",
                    {
                      type: "button",
                      onclick: () =>
                        act(async () => {
                          await api.del(
                            api.path`/api/bindings/${vhost}/e/${binding.source}/q/${name}/${binding.properties_key}`,
                          );
                          await load();
                        }, "Unbound"),
                    },
                    "Unbind",
                  ),
          },
        ],
        rows: bindings,
      }),
    );
  }
  const section = h(
    "section",
    { "aria-label": "Bindings" },
    h("h3", {}, "Bindings"),
    listing,
    h(
      "form",
      {
        class: "toolbar",
        onsubmit: (event) => {
          event.preventDefault();
          const values = event.target.elements;
          act(async () => {
            await api.post(api.path`/api/bindings/${vhost}/e/${values.exchange.value}/q/${name}`, {
              routing_key: values.routing_key.value,
              arguments: {},
            });
            await load();
          }, "Bound");
        },
      },
      field("From exchange", h("input", { name: "exchange", required: true })),
      field("Routing key", h("input", { name: "routing_key" })),
      h("button", { type: "submit" }, "Bind"),
    ),
  );
  act(load);
  return section;
}
