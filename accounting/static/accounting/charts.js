// Draws every <canvas data-chart="ID"> from the JSON in <script id="ID"> (Django json_script).
(function () {
  "use strict";
  function draw() {
    document.querySelectorAll("canvas[data-chart]").forEach(function (canvas) {
      var source = document.getElementById(canvas.dataset.chart);
      if (!source || !window.Chart) { return; }
      var spec = JSON.parse(source.textContent);
      var stacked = spec.datasets.some(function (d) { return d.stack; });
      var empty = !spec.labels.length || spec.datasets.every(function (d) {
        return !d.data.length || d.data.every(function (v) { return v === null || v === 0; });
      });
      describe(canvas, empty);
      new window.Chart(canvas, {
        type: spec.type,
        data: { labels: spec.labels, datasets: spec.datasets },
        options: {
          responsive: true,
          animation: false,
          // A chart of two units names its own axes (`scales`); others share one y axis.
          scales: spec.scales ||
            { x: { stacked: stacked }, y: { stacked: stacked, beginAtZero: true } }
        }
      });
    });
  }
  // The chart's name for screen readers (its card's heading), and "No data yet" over an empty
  // grid rather than a bare one.
  function describe(canvas, empty) {
    var card = canvas.closest(".card-body");
    var heading = card && card.querySelector("h2, h3");
    var title = heading ? heading.textContent.trim() : "Chart";
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", empty ? title + ": no data yet" : title);
    if (!empty || !canvas.parentNode) { return; }
    var box = document.createElement("div");
    box.className = "position-relative";
    canvas.parentNode.insertBefore(box, canvas);
    box.appendChild(canvas);
    var note = document.createElement("p");
    note.className = "chart-empty position-absolute top-50 start-50 translate-middle mb-0 " +
      "px-3 py-1 rounded bg-body text-body-secondary";
    note.dataset.testid = "chart-empty";
    note.setAttribute("aria-hidden", "true");
    note.textContent = "No data yet";
    box.appendChild(note);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
