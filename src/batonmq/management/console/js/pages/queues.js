// Queues: one page of the list at a time, filtered by name and sorted by the API (RabbitMQ's
// page, page_size, name, use_regex, sort and sort_reverse), and a form to declare a queue.

import * as api from "../api.js";
import { act, field, h, number, replace, select, table } from "../dom.js";
import { queueLink, rate, vhostNames } from "./common.js";

const COLUMNS = [
  { key: "name", label: "Name", sortable: true, render: (row) => queueLink(row.vhost, row.name) },
  { key: "vhost", label: "Virtual host", sortable: true },
  { key: "type", label: "Type", sortable: true },
  { key: "paused", label: "State", render: (row) => (row.paused ? "paused" : row.state) },
  { key: "consumers", label: "Consumers", number: true, sortable: true },
  { key: "messages_ready", label: "Ready", number: true, sortable: true },
  { key: "messages_unacknowledged", label: "Unacked", number: true, sortable: true },
  { key: "messages", label: "Total", number: true, sortable: true },
  ...[
    ["publish", "In /s"],
    ["deliver_get", "Out /s"],
  ].map(([count, label]) => ({
    key: `message_stats.${count}_details.rate`,
    label,
    number: true,
    sortable: true,
    render: (row) => rate(row.message_stats, count).toFixed(1),
  })),
];

export async function show(container) {
  const state = { page: 1, size: 100, name: "", regex: false, sort: { key: "name", reverse: false } };
  const listing = h("div", { class: "listing" });
  const pager = h("div", { class: "toolbar pager" });

  async function refresh() {
    const answer = await api.get(
      `/api/queues${api.query({
        page: state.page,
        page_size: state.size,
        name: state.name,
        use_regex: state.regex ? "true" : undefined,
        sort: state.sort.key,
        sort_reverse: state.sort.reverse ? "true" : undefined,
      })}`,
    );
    replace(
      listing,
      table({
        columns: COLUMNS,
        rows: answer.items,
        sort: state.sort,
        empty: "No queues",
        onSort: (key) => {
          state.sort = { key, reverse: state.sort.key === key && !state.sort.reverse };
          act(refresh);
        },
      }),
    );
    replace(
      pager,
      h("button", { type: "button", disabled: state.page <= 1, onclick: () => turn(-1) }, "‹ Previous"),
      `Page ${answer.page} of ${Math.max(1, answer.page_count)} (${number(answer.filtered_count)} of ${number(answer.total_count)} queues)`,
      h("button", { type: "button", disabled: state.page >= answer.page_count, onclick: () => turn(1) }, "Next ›"),
    );
  }

  function turn(by) {
    state.page += by;
    act(refresh);
  }

  const filter = h("input", { name: "filter", type: "search", placeholder: "name" });
  const regex = h("input", { name: "regex", type: "checkbox" });
  const size = select("page_size", ["20", "100", "500"], "100");
  const filters = h(
    "form",
    {
      class: "toolbar",
      onsubmit: (event) => {
        event.preventDefault();
        state.name = filter.value;
        state.regex = regex.checked;
        state.size = Number(size.value);
        state.page = 1;
        act(refresh);
      },
    },
    field("Filter", filter),
    field("Regex", regex),
    field("Page size", size),
    h("button", { type: "submit" }, "Apply"),
  );

  replace(container, h("h2", {}, "Queues"), filters, listing, pager, await addForm(refresh));
  await refresh();
  return { refresh };
}

async function addForm(refresh) {
  const vhosts = await vhostNames();
  const form = h(
    "form",
    {
      class: "add-queue",
      onsubmit: (event) => {
        event.preventDefault();
        const values = event.target.elements;
        const name = values.name.value;
        const body = {
          durable: values.durable.checked,
          auto_delete: values.auto_delete.checked,
          arguments: values.type.value === "classic" ? {} : { "x-queue-type": values.type.value },
        };
        act(async () => {
          await api.put(api.path`/api/queues/${values.vhost.value}/${name}`, body);
          values.name.value = "";
          await refresh();
        }, `Queue ${name} declared`);
      },
    },
    h(
      "fieldset",
      {},
      h("legend", {}, "Add a queue"),
      field("Virtual host", select("vhost", vhosts, vhosts.includes("/") ? "/" : vhosts[0])),
      field("Name", h("input", { name: "name", required: true })),
      field("Type", select("type", ["classic", "stream"], "classic")),
      field("Durable", h("input", { name: "durable", type: "checkbox", checked: true })),
      field("Auto-delete", h("input", { name: "auto_delete", type: "checkbox" })),
      h("button", { type: "submit" }, "Add queue"),
    ),
  );
  return form;
}
