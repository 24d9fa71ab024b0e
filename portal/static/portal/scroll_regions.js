// A table box that scrolls sideways (a wide table on a phone) must be reachable by keyboard to
// be scrolled: give it a tab stop and a name while it scrolls, and take them back when it fits.
(() => {
  function mark() {
    document.querySelectorAll(".table-responsive").forEach((box) => {
      if (box.scrollWidth > box.clientWidth + 1) {
        box.tabIndex = 0;
        box.setAttribute("role", "region");
        if (!box.hasAttribute("aria-label")) box.setAttribute("aria-label", "Table, scrolls sideways");
      } else if (box.getAttribute("role") === "region") {
        box.removeAttribute("tabindex");
        box.removeAttribute("role");
        box.removeAttribute("aria-label");
      }
    });
  }
  let pending = null;
  const later = () => { cancelAnimationFrame(pending); pending = requestAnimationFrame(mark); };
  document.addEventListener("DOMContentLoaded", mark);
  window.addEventListener("resize", later);
  document.addEventListener("htmx:afterSettle", later);
})();
