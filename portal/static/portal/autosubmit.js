// Submit a form when one of its [data-autosubmit] fields changes (CSP forbids inline onchange).
document.addEventListener("change", (event) => {
  const field = event.target.closest("[data-autosubmit]");
  if (field && field.form) field.form.submit();
});
