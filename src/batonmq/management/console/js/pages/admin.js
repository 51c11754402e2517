// Users, virtual hosts and permissions (administrators: the Qpid management console's
// UserManagement and RabbitMQ's Admin tab, whose user page sets "configure", "write" and "read"
// regular expressions per virtual host). Other users see the virtual hosts they may use.

import * as api from "../api.js";
import { act, field, h, replace, select, table } from "../dom.js";

const TAGS = ["administrator", "monitoring", "policymaker", "management", ""];

export async function show(container, _params, { user }) {
  const administrator = user.tags.includes("administrator");
  const usersList = h("div");
  const vhostsList = h("div");
  const permissionsList = h("div", { id: "permissions" });

  async function refresh() {
    const [users, vhosts, permissions] = await Promise.all([
      administrator ? api.get("/api/users") : Promise.resolve(null),
      api.get("/api/vhosts"),
      administrator ? api.get("/api/permissions") : Promise.resolve(null),
    ]);
    if (permissions) {
      replace(
        permissionsList,
        table({
          columns: [
            { key: "user", label: "User" },
            { key: "vhost", label: "Virtual host" },
            { key: "configure", label: "Configure" },
            { key: "write", label: "Write" },
            { key: "read", label: "Read" },
            {
              key: "clear",
              label: "",
              render: (row) =>
                h(
                  "button",
                  { type: "button", class: "danger", onclick: () => clearPermissions(row.vhost, row.user) },
                  "Clear",
                ),
            },
          ],
          rows: permissions,
        }),
      );
    }
    if (users) {
      replace(
        usersList,
        table({
          columns: [
            { key: "name", label: "Name" },
            { key: "tags", label: "Tags", render: (row) => row.tags.join(", ") },
            {
              key: "delete",
              label: "",
              render: (row) =>
                row.name === user.name
                  ? ""
                  : h("button", { type: "button", class: "danger", onclick: () => removeUser(row.name) }, "Delete"),
            },
          ],
          rows: users,
        }),
      );
    }
    replace(
      vhostsList,
      table({
        columns: [
          { key: "name", label: "Name" },
          { key: "messages_ready", label: "Ready", number: true },
          { key: "messages_unacknowledged", label: "Unacked", number: true },
          { key: "messages", label: "Total", number: true },
          {
            key: "delete",
            label: "",
            render: (row) =>
              administrator
                ? h("button", { type: "button", class: "danger", onclick: () => removeVhost(row.name) }, "Delete")
                : "",
          },
        ],
        rows: vhosts,
      }),
    );
  }

  function removeUser(name) {
    if (!confirm(`Delete user ${name}?`)) return;
    act(async () => {
      await api.del(api.path`/api/users/${name}`);
      await refresh();
    }, `User ${name} deleted`);
  }

  function clearPermissions(vhost, name) {
    if (!confirm(`Take all permissions of ${name} in ${vhost} away?`)) return;
    act(async () => {
      await api.del(api.path`/api/permissions/${vhost}/${name}`);
      await refresh();
    }, `Permissions of ${name} in ${vhost} cleared`);
  }

  function removeVhost(name) {
    if (!confirm(`Delete virtual host ${name}, its connections and everything in it?`)) return;
    act(async () => {
      await api.del(api.path`/api/vhosts/${name}`);
      await refresh();
    }, `Virtual host ${name} deleted`);
  }

  const userForm = h(
    "form",
    {
      onsubmit: (event) => {
        event.preventDefault();
        const values = event.target.elements;
        const name = values.name.value;
        const body = { tags: values.tags.value };
        if (values.password.value) body.password = values.password.value;
        act(async () => {
          await api.put(api.path`/api/users/${name}`, body);
          values.password.value = "";
          await refresh();
        }, `User ${name} saved`);
      },
    },
    h(
      "fieldset",
      {},
      h("legend", {}, "Add or update a user"),
      field("Name", h("input", { name: "name", required: true })),
      field("Password", h("input", { name: "password", type: "password", autocomplete: "new-password" })),
      field("Tags", select("tags", TAGS.map((tag) => [tag, tag || "none (AMQP only)"]), "management")),
      h("button", { type: "submit" }, "Save user"),
    ),
  );
  const vhostForm = h(
    "form",
    {
      onsubmit: (event) => {
        event.preventDefault();
        const values = event.target.elements;
        const name = values.name.value;
        act(async () => {
          await api.put(api.path`/api/vhosts/${name}`, {});
          values.name.value = "";
          await refresh();
        }, `Virtual host ${name} added`);
      },
    },
    h(
      "fieldset",
      {},
      h("legend", {}, "Add a virtual host"),
      field("Name", h("input", { name: "name", required: true })),
      h("button", { type: "submit" }, "Add virtual host"),
    ),
  );

  const permissionsForm = h(
    "form",
    {
      onsubmit: (event) => {
        event.preventDefault();
        const values = event.target.elements;
        const name = values.user.value;
        const vhost = values.vhost.value;
        const body = { configure: values.configure.value, write: values.write.value, read: values.read.value };
        act(async () => {
          await api.put(api.path`/api/permissions/${vhost}/${name}`, body);
          await refresh();
        }, `Permissions of ${name} in ${vhost} set`);
      },
    },
    h(
      "fieldset",
      {},
      h("legend", {}, "Set a user's permissions (regular expressions; '' allows nothing)"),
      field("User", h("input", { name: "user", required: true })),
      field("Virtual host", h("input", { name: "vhost", required: true, value: "/" })),
      field("Configure", h("input", { name: "configure", value: ".*" })),
      field("Write", h("input", { name: "write", value: ".*" })),
      field("Read", h("input", { name: "read", value: ".*" })),
      h("button", { type: "submit" }, "Set permissions"),
    ),
  );

  replace(
    container,
    h("h2", {}, "Users"),
    administrator ? [usersList, userForm] : h("p", { class: "muted" }, "Users are managed by administrators."),
    h("h2", {}, "Virtual hosts"),
    vhostsList,
    administrator ? vhostForm : null,
    administrator ? [h("h2", {}, "Permissions"), permissionsList, permissionsForm] : null,
  );
  await refresh();
  return { refresh };
}


