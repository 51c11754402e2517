// The members of this broker's HA cluster (MQ 4.1 HA guide, `imqcmd list bkr`, Example 1): state,
// messages in the store, who took a member over, time since its last update in the store. An
// administrator takes another member over (`takeover bkr`, with the guide's confirmation when it
// appears to be running), and quiesces or unquiesces the broker it is connected to.

import * as api from "../api.js";
import { act, h, number, replace, table, yesNo } from "../dom.js";

export async function show(container) {
  const members = h("div");

  async function refresh() {
    // /api/nodes lists every member of an HA cluster, each with its broker id; a standalone
    // broker is its one node, without one.
    const listed = await api.get("/api/nodes");
    if (!listed.some((node) => node.broker_id !== undefined)) {
      replace(
        members,
        h("p", {}, "This broker is not a member of an HA cluster (cluster.ha): it is its one node."),
        table({
          columns: [
            { key: "name", label: "Node" },
            { key: "running", label: "Running", render: (row) => yesNo(row.running) },
          ],
          rows: listed,
        }),
      );
      return;
    }
    replace(
      members,
      table({
        columns: [
          { key: "broker_id", label: "Broker ID", render: (row) => (row.local ? `${row.broker_id} (this broker)` : row.broker_id) },
          { key: "address", label: "Address", render: (row) => row.address ?? "" },
          { key: "state", label: "State" },
          { key: "messages", label: "Msgs in store", number: true, render: (row) => number(row.messages) },
          { key: "taken_over_by", label: "Taken over by", render: (row) => row.taken_over_by ?? "" },
          { key: "silent_for", label: "Last heartbeat", number: true, render: (row) => `${Math.round(row.silent_for)} s ago` },
          { key: "no_failover", label: "No failover", render: (row) => yesNo(row.no_failover) },
          { key: "act", label: "", render: actions },
        ],
        rows: listed,
        empty: "No members",
        rowProps: (row) => ({ "data-broker": row.broker_id }),
      }),
    );
  }

  function actions(row) {
    if (row.local) {
      const quiesced = row.state === "QUIESCING" || row.state === "QUIESCE_COMPLETE";
      const verb = quiesced ? "unquiesce" : "quiesce";
      return h("button", { type: "button", onclick: () => quiesce(row.broker_id, verb) }, quiesced ? "Unquiesce" : "Quiesce");
    }
    if (row.taken_over_by) return "";
    return h("button", { type: "button", class: "danger", onclick: () => takeOver(row) }, "Take over");
  }

  function quiesce(id, verb) {
    act(async () => {
      await api.put(api.path`/api/cluster/brokers/${id}/` + verb);
      await refresh();
    }, verb === "quiesce" ? "Quiesced: new connections are refused" : "Unquiesced: new connections are accepted");
  }

  function takeOver(row) {
    // The HA guide's confirmation for a member that appears to be running (its store lease
    // runs); confirmed, the takeover is forced (-f), which fences that member.
    const question = row.lease_live
      ? `The broker associated with ${row.broker_id} last accessed the database ${Math.round(row.silent_for)} seconds ago. Do you want to take over for this broker?`
      : `Take over broker ${row.broker_id}?`;
    if (!confirm(question)) return;
    act(async () => {
      const outcome = await api.post(api.path`/api/cluster/brokers/${row.broker_id}/takeover`, { force: row.lease_live });
      await refresh();
      if (!outcome.taken_over) throw new Error(`Not taken over: ${outcome.reason}`);
    }, `Broker ${row.broker_id} taken over`);
  }

  replace(container, h("h2", {}, "Cluster"), members);
  await refresh();
  return { refresh };
}
