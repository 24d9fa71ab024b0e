// The request form: show the vGPU memory and cores fields only while a vGPU flavor is chosen
// (whole cards and MIG slices have fixed shapes), also after HTMX swaps the flavor options in.
(function () {
  const VGPU_FIELDS = ["gpu_memory_mib", "gpu_cores_percent"];

  function sync() {
    const select = document.getElementById("id_flavor");
    if (!select) return;
    const option = select.options[select.selectedIndex];
    const isVgpu = Boolean(option && option.dataset.kind === "vgpu");
    for (const name of VGPU_FIELDS) {
      const wrapper = document.querySelector(`[data-field="${name}"]`);
      if (!wrapper) continue;
      wrapper.hidden = !isVgpu;
      // A disabled field is not submitted: a whole card never sends a vGPU share.
      for (const input of wrapper.querySelectorAll("input")) input.disabled = !isVgpu;
    }
  }

  document.addEventListener("change", (event) => {
    if (event.target && event.target.id === "id_flavor") sync();
  });
  document.addEventListener("htmx:afterSwap", sync);
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", sync);
  } else {
    sync();
  }
})();
