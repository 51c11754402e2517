// Overview: the broker's totals, and charts of message rates and queue depths that grow with
// every poll of /api/overview and /api/queues (the console keeps sampling on every page, so
// the charts have history when the overview is opened). The rates are the broker's own
// (message_stats.*_details.rate, per second over its last 5 s sample), as RabbitMQ's
// console charts them, not differences between two polls.

import * as api from "../api.js";
import { drawBars, drawLines } from "../chart.js";
import { h, number, replace } from "../dom.js";
import { rate } from "./common.js";

// Samples kept: ten minutes at the default 5 s interval.
const CAPACITY = 120;
// The deepest queues charted.
const DEEPEST = 8;

const history = { samples: [], overview: null, deepest: [] };
let page = null;

export function forget() {
  history.samples = [];
  history.overview = null;
  history.deepest = [];
  page = null;
}

// One poll: the totals, the broker's rates, the deepest queues. A call while a poll is under
// way waits for that poll.
let polling = null;

export function sample() {
  if (!polling) polling = poll().finally(() => (polling = null));
  return polling;
}

async function poll() {
  const [overview, deepest] = await Promise.all([
    api.get("/api/overview"),
    api.get(
      `/api/queues${api.query({
        page: 1,
        page_size: DEEPEST,
        sort: "messages",
        sort_reverse: "true",
        columns: "name,vhost,messages",
      })}`,
    ),
  ]);
  const totals = overview.queue_totals;
  const stats = overview.message_stats;
  history.samples.push({
    ready: totals.messages_ready,
    unacked: totals.messages_unacknowledged,
    publish: rate(stats, "publish"),
    deliver: rate(stats, "deliver_get"),
    ack: rate(stats, "ack"),
  });
  history.overview = overview;
  history.deepest = deepest.items;
  if (history.samples.length > CAPACITY) history.samples.shift();
  if (page && page.isConnected) draw(page);
}

function series(label, key) {
  return { label, values: history.samples.map((item) => item[key]) };
}

function draw(container) {
  const overview = history.overview;
  if (!overview) return;
  const objects = overview.object_totals;
  const totals = overview.queue_totals;
  replace(
    container.querySelector(".totals"),
    [
      ["Connections", objects.connections],
      ["Channels", objects.channels],
      ["Exchanges", objects.exchanges],
      ["Queues", objects.queues],
      ["Consumers", objects.consumers],
      ["Messages ready", totals.messages_ready],
      ["Unacknowledged", totals.messages_unacknowledged],
    ].map(([name, value]) => h("div", {}, h("strong", {}, number(value)), name)),
  );
  replace(
    container.querySelector(".node"),
    `${overview.product_name} ${overview.product_version} on ${overview.node}`,
  );
  const rates = [series("publish /s", "publish"), series("deliver+get /s", "deliver"), series("ack /s", "ack")];
  const depth = [series("ready", "ready"), series("unacknowledged", "unacked")];
  const deepest = history.deepest.map((item) => ({ label: `${item.name} (${item.vhost})`, value: item.messages }));
  drawLines(container.querySelector("canvas.rates"), rates, CAPACITY);
  drawLines(container.querySelector("canvas.depth"), depth, CAPACITY);
  drawBars(container.querySelector("canvas.deepest"), deepest);
  // The newest figures in words, beside each chart.
  replace(container.querySelector(".rates-now"), latest(rates, (value) => value.toFixed(1)));
  replace(container.querySelector(".depth-now"), latest(depth, number));
  replace(container.querySelector(".deepest-now"), deepest.map((bar) => `${bar.label}: ${number(bar.value)}`).join(", "));
  const samples = history.samples.length;
  replace(container.querySelector(".samples"), `${samples} sample${samples === 1 ? "" : "s"}`);
}

function latest(lines, format) {
  return lines
    .filter((line) => line.values.length)
    .map((line) => `${line.label} ${format(line.values[line.values.length - 1])}`)
    .join(", ");
}

function chart(title, name) {
  return h(
    "figure",
    { class: "chart" },
    h("figcaption", {}, title),
    h("canvas", { class: name, role: "img", "aria-label": title }),
    h("p", { class: `${name}-now muted` }),
  );
}

export async function show(container) {
  page = container;
  replace(
    container,
    h("h2", {}, "Overview"),
    h("p", { class: "node muted" }),
    h("section", { class: "totals", "aria-label": "Totals" }),
    h(
      "section",
      { class: "charts" },
      chart("Message rates (per second)", "rates"),
      chart("Queued messages", "depth"),
      chart("Deepest queues", "deepest"),
    ),
    h("p", { class: "samples muted" }),
  );
  if (!history.overview) await sample();
  else draw(container);
}
