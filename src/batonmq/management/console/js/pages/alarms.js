// Alarms: RabbitMQ's health check of resource alarms (memory; disk for the store's quota and
// free space), and the node's alarm flags and uptime for monitoring users.

import * as api from "../api.js";
import { facts, h, replace, table, yesNo } from "../dom.js";

function uptime(milliseconds) {
  const seconds = Math.floor(milliseconds / 1000);
  const parts = [
    [Math.floor(seconds / 86400), "d"],
    [Math.floor((seconds % 86400) / 3600), "h"],
    [Math.floor((seconds % 3600) / 60), "m"],
    [seconds % 60, "s"],
  ];
  return parts.filter(([value], index) => value || index === parts.length - 1).map(([value, unit]) => `${value}${unit}`).join(" ");
}

export async function show(container, _params, { user }) {
  const seesNodes = user.tags.includes("administrator") || user.tags.includes("monitoring");
  const checks = h("div");
  const nodes = h("div");

  async function refresh() {
    // 503 is the check's answer while an alarm is in effect, not a failure to ask.
    const [check, nodeList] = await Promise.all([
      api.get("/api/health/checks/alarms", { accept: [503] }),
      seesNodes ? api.get("/api/nodes") : Promise.resolve([]),
    ]);
    replace(
      checks,
      check.status === "ok"
        ? h("p", { class: "alarm-status" }, "No alarm in effect.")
        : [
            h("p", { class: "alarm-status error" }, check.reason),
            table({
              columns: [
                { key: "resource", label: "Resource" },
                { key: "reason", label: "Reason" },
                { key: "node", label: "Node" },
              ],
              rows: check.alarms,
            }),
          ],
    );
    replace(
      nodes,
      nodeList.map((node) =>
        facts([
          ["Node", node.name],
          ["Version", node.product_version],
          ["Uptime", uptime(node.uptime)],
          ["Memory alarm", yesNo(node.mem_alarm)],
          ["Disk alarm", yesNo(node.disk_free_alarm)],
        ]),
      ),
    );
  }

  replace(container, h("h2", {}, "Alarms"), checks, seesNodes ? [h("h3", {}, "Node"), nodes] : null);
  await refresh();
  return { refresh };
}
