// Building the page: elements from data, tables, forms and the status line.
//
// Everything shown is put in as text (text nodes, attributes): names of queues, users and
// messages are input from anyone who can connect, and nothing here parses them as HTML.

export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "class") element.className = value;
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  return fill(element, ...children);
}

// `element` with `children` (nodes, or anything else as text) appended.
export function fill(element, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

export function replace(element, ...children) {
  element.replaceChildren();
  return fill(element, ...children);
}

const numbers = new Intl.NumberFormat("en");

export function number(value) {
  return typeof value === "number" ? numbers.format(value) : "";
}

export function bytes(value) {
  if (typeof value !== "number") return "";
  const units = ["B", "KiB", "MiB", "GiB"];
  let shown = value;
  let unit = 0;
  while (shown >= 1024 && unit < units.length - 1) {
    shown /= 1024;
    unit += 1;
  }
  return `${unit ? shown.toFixed(1) : shown} ${units[unit]}`;
}

export function yesNo(value) {
  return value ? "yes" : "no";
}

// A table. `columns`: [{key, label, number?, render?(row), sortable?}]; `sort`: {key, reverse}
// shown on the sorted column; `onSort(key)` when a sortable header is clicked.
export function table({ columns, rows, sort, onSort, empty = "None", rowProps }) {
  const head = h(
    "tr",
    {},
    columns.map((column) => {
      const label = column.label ?? column.key;
      const sorted = sort && sort.key === column.key;
      const content =
        column.sortable && onSort
          ? h("button", { type: "button", class: "sort", onclick: () => onSort(column.key) }, label)
          : label;
      return h(
        "th",
        {
          class: column.number ? "number" : undefined,
          "aria-sort": sorted ? (sort.reverse ? "descending" : "ascending") : undefined,
        },
        content,
        sorted ? (sort.reverse ? " ▼" : " ▲") : "",
      );
    }),
  );
  const body = rows.length
    ? rows.map((row) =>
        h(
          "tr",
          rowProps ? rowProps(row) : {},
          columns.map((column) =>
            h(
              "td",
              { class: column.number ? "number" : column.class },
              column.render ? column.render(row) : column.number ? number(row[column.key]) : row[column.key],
            ),
          ),
        ),
      )
    : [h("tr", {}, h("td", { colspan: columns.length, class: "muted" }, empty))];
  return h("table", {}, h("thead", {}, head), h("tbody", {}, body));
}

// A table of name / value pairs.
export function facts(pairs) {
  return h(
    "table",
    { class: "facts" },
    h("tbody", {}, pairs.map(([name, value]) => h("tr", {}, h("th", { scope: "row" }, name), h("td", {}, value)))),
  );
}

export function field(label, input) {
  return h("label", {}, `${label} `, input);
}

export function select(name, options, selected) {
  return h(
    "select",
    { name },
    options.map((option) => {
      const [value, label] = Array.isArray(option) ? option : [option, option];
      return h("option", { value, selected: value === selected }, label);
    }),
  );
}

// The status line: what the last action did, or why it failed.
export function say(text, kind = "info") {
  replace(document.getElementById("status"), h("span", { class: kind, role: kind === "error" ? "alert" : undefined }, text));
}

export function clearStatus() {
  document.getElementById("status").replaceChildren();
}

// Run an action from a button or form: its outcome goes to the status line.
export async function act(action, done) {
  try {
    const result = await action();
    if (done) say(typeof done === "function" ? done(result) : done);
    return result;
  } catch (error) {
    say(error.message, "error");
    return undefined;
  }
}
