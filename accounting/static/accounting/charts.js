// Draws every <canvas data-chart="ID"> from the JSON in <script id="ID"> (Django json_script).
(function () {
  "use strict";
  function draw() {
    document.querySelectorAll("canvas[data-chart]").forEach(function (canvas) {
      var source = document.getElementById(canvas.dataset.chart);
      if (!source || !window.Chart) { return; }
      var spec = JSON.parse(source.textContent);
      var stacked = spec.datasets.some(function (d) { return d.stack; });
      new window.Chart(canvas, {
        type: spec.type,
        data: { labels: spec.labels, datasets: spec.datasets },
        options: {
          responsive: true,
          animation: false,
          scales: { x: { stacked: stacked }, y: { stacked: stacked, beginAtZero: true } }
        }
      });
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
