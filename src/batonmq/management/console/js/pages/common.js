// What several pages show the same way.

import * as api from "../api.js";
import { h } from "../dom.js";

export function queueHref(vhost, name) {
  return `#/queues/${encodeURIComponent(vhost)}/${encodeURIComponent(name)}`;
}

export function queueLink(vhost, name) {
  return h("a", { href: queueHref(vhost, name) }, name);
}

// The virtual hosts the user sees, by name.
export async function vhostNames() {
  const vhosts = await api.get("/api/vhosts");
  return vhosts.map((vhost) => vhost.name);
}

// The default exchange by the name the API gives it in paths.
export function exchangePathName(name) {
  return name === "" ? "amq.default" : name;
}

export function exchangeLabel(name) {
  return name === "" ? "(AMQP default)" : name;
}

// A count's rate per second in RabbitMQ's message_stats (`NAME_details.rate`, the broker's
// own, over its last 5 s sample); 0 before the broker's second sample.
export function rate(stats, key) {
  return stats?.[`${key}_details`]?.rate ?? 0;
}
