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
      var chart = new window.Chart(canvas, {
        type: spec.type,
        data: { labels: spec.labels, datasets: spec.datasets },
        options: {
          responsive: true,
          animation: false,
          // On a phone a wide, flat chart leaves no room below its legend: make it taller.
          aspectRatio: window.innerWidth < 576 ? 1.3 : undefined,
          // A chart of two units names its own axes (`scales`); others share one y axis.
          scales: spec.scales ||
            { x: { stacked: stacked }, y: { stacked: stacked, beginAtZero: true } },
          plugins: { zoom: zoomOptions(canvas) }
        }
      });
      canvas.chart = chart;
    });
  }
  // Zoom along time (chartjs-plugin-zoom): drag across the chart, or Ctrl + wheel, so the
  // wheel alone still scrolls the page. "Reset zoom" appears once zoomed.
  function zoomOptions(canvas) {
    if (!window.ChartZoom) { return undefined; }
    return {
      zoom: {
        drag: { enabled: true, threshold: 8 },
        wheel: { enabled: true, modifierKey: "ctrl" },
        mode: "x",
        onZoomComplete: function (context) { resetButton(canvas, context.chart); }
      }
    };
  }
  function resetButton(canvas, chart) {
    if (canvas.parentNode.querySelector("[data-testid=reset-zoom]")) { return; }
    var button = document.createElement("button");
    button.type = "button";
    button.className = "btn btn-sm btn-outline-secondary mt-2";
    button.dataset.testid = "reset-zoom";
    button.textContent = "Reset zoom";
    button.addEventListener("click", function () {
      chart.resetZoom();
      button.remove();
    });
    canvas.insertAdjacentElement("afterend", button);
  }
  // The time-range picker: a preset applies at once (clearing From/To); editing From or To
  // chooses "Custom". Without script the form's Show button does the same.
  function wirePickers() {
    document.querySelectorAll("form[data-range-picker]").forEach(function (form) {
      var choice = form.querySelector("select[name=range]");
      var bounds = form.querySelectorAll("input[name=start], input[name=end]");
      choice.addEventListener("change", function () {
        if (choice.value === "custom") {
          bounds[0].focus();
          return;
        }
        bounds.forEach(function (input) { input.value = ""; });
        form.requestSubmit();
      });
      bounds.forEach(function (input) {
        input.addEventListener("change", function () { choice.value = "custom"; });
      });
    });
  }
  function start() {
    draw();
    wirePickers();
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
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
