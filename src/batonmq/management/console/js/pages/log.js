// The broker's log level (GET / PUT /api/broker/log-level {"level"}) and its recent log
// (GET /api/broker/log?lines=N): the Qpid management console's LoggingManagement, for
// administrators.

import * as api from "../api.js";
import { act, field, h, replace, select, table } from "../dom.js";

const LEVELS = ["debug", "info", "warning", "error"];
const SHOWN = ["50", "100", "500", "1000"];
// The fields every record has; the others are shown after its message.
const FIXED = new Set(["ts", "level", "logger", "msg"]);

function extras(record) {
  return Object.entries(record)
    .filter(([key]) => !FIXED.has(key))
    .map(([key, value]) => `${key}=${typeof value === "string" ? value : JSON.stringify(value)}`)
    .join(" ");
}

export async function show(container, _params, { user }) {
  if (!user.tags.includes("administrator")) {
    replace(container, h("h2", {}, "Log"), h("p", { class: "muted" }, "The log is for administrators."));
    return null;
  }
  const levelForm = h("form", { class: "toolbar log-level" });
  const records = h("div", { class: "records" });
  const lines = select("lines", SHOWN, "100");
  const least = select("least", [["", "every level"], ...LEVELS.map((level) => [level, `${level} and above`])], "");

  async function showLevel() {
    const current = await api.get("/api/broker/log-level", { accept: [404] });
    if (!current || !current.level) {
      replace(levelForm, h("p", { class: "muted" }, "This broker does not offer changing its log level."));
      return;
    }
    const choice = select("level", LEVELS, current.level);
    replace(
      levelForm,
      field("Log level", choice),
      h(
        "button",
        {
          type: "button",
          onclick: () =>
            act(async () => {
              await api.put("/api/broker/log-level", { level: choice.value });
              await showLevel();
            }, `Log level set to ${choice.value}`),
        },
        "Set level",
      ),
    );
  }

  async function refresh() {
    const recent = await api.get(`/api/broker/log${api.query({ lines: lines.value })}`);
    const floor = least.value ? LEVELS.indexOf(least.value) : 0;
    const shown = recent.filter((record) => {
      const at = LEVELS.indexOf(record.level);
      return at === -1 || at >= floor;
    });
    replace(
      records,
      table({
        columns: [
          { key: "ts", label: "Time" },
          { key: "level", label: "Level" },
          { key: "logger", label: "Logger" },
          { key: "msg", label: "Message" },
          { key: "fields", label: "Fields", class: "payload", render: extras },
        ],
        rows: shown.reverse(),
        empty: "No records",
        rowProps: (record) => ({ class: `level-${record.level}` }),
      }),
    );
  }

  lines.addEventListener("change", () => act(refresh));
  least.addEventListener("change", () => act(refresh));
  replace(
    container,
    h("h2", {}, "Log level"),
    levelForm,
    h("h2", {}, "Recent log"),
    h("div", { class: "toolbar" }, field("Show the last", lines), field("Levels", least)),
    records,
  );
  await Promise.all([showLevel(), refresh()]);
  return { refresh };
}
