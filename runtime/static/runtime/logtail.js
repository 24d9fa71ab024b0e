// Keep the request page's log tail scrolled to its newest line after each htmx refresh.
(function () {
  function scrollTails() {
    document.querySelectorAll("[data-log-tail]").forEach(function (box) {
      box.scrollTop = box.scrollHeight;
    });
  }
  document.addEventListener("DOMContentLoaded", scrollTails);
  document.addEventListener("htmx:afterSettle", scrollTails);
})();
