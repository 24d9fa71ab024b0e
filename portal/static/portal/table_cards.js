// On a phone every table is a stack of cards (portal.css) and each cell is headed by its column's
// name. The name is read here from the table's last header row, so that no template repeats its
// headers cell by cell; a cell that has a data-label of its own keeps it, a header that is only
// for screen readers (.visually-hidden) gives no label, and a cell that spans columns gets none.
(() => {
  function columnNames(table) {
    const head = table.tHead;
    if (!head || !head.rows.length) return null;
    const names = [];
    for (const cell of head.rows[head.rows.length - 1].cells) {
      const shown = cell.cloneNode(true);
      shown.querySelectorAll(".visually-hidden").forEach((hidden) => hidden.remove());
      const name = shown.textContent.replace(/\s+/g, " ").trim();
      for (let i = 0; i < (cell.colSpan || 1); i += 1) names.push(name);
    }
    return names;
  }
  function label() {
    document.querySelectorAll("main table.table").forEach((table) => {
      const names = columnNames(table);
      if (!names) return;
      for (const body of table.tBodies) {
        for (const row of body.rows) {
          let column = 0;
          for (const cell of row.cells) {
            const name = names[column];
            if (cell.tagName === "TD" && cell.colSpan === 1 && name && !cell.hasAttribute("data-label")) {
              cell.setAttribute("data-label", name);
            }
            column += cell.colSpan || 1;
          }
        }
      }
    });
  }
  document.addEventListener("DOMContentLoaded", label);
  document.addEventListener("htmx:afterSettle", label);
})();
