// Draws a request's GPU activity and memory timeline from the page's JSON data.
(function () {
  const data = JSON.parse(document.getElementById("utilisation-data").textContent);
  const canvas = document.getElementById("utilisation-chart");
  if (!canvas || !window.Chart) return;
  new Chart(canvas, {
    type: "line",
    data: {
      labels: data.labels.map((t) => new Date(t).toLocaleTimeString()),
      datasets: [
        { label: "GPU activity %", data: data.activity, yAxisID: "y", tension: 0.2 },
        { label: "Memory used (MiB)", data: data.memory, yAxisID: "memory", tension: 0.2 },
      ],
    },
    options: {
      animation: false,
      scales: {
        y: { min: 0, max: 100, title: { display: true, text: "%" } },
        memory: { position: "right", min: 0, grid: { drawOnChartArea: false } },
      },
    },
  });
})();
