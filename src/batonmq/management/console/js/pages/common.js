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
