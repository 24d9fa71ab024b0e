// Names Swagger UI leaves out of its controls, given as it renders them: the dialog's close
// button, the request body's text box, and the Authorize button whose spoken name differs
// from the word it shows.
(function () {
  "use strict";
  const root = document.getElementById("swagger-ui");
  if (!root) return;
  const name = () => {
    root.querySelectorAll("button.close-modal:not([aria-label])")
      .forEach((button) => button.setAttribute("aria-label", "Close"));
    root.querySelectorAll("textarea.body-param__text:not([aria-label])")
      .forEach((box) => box.setAttribute("aria-label", "Request body (JSON)"));
    root.querySelectorAll("button.authorize[aria-label='Apply credentials']")
      .forEach((button) => button.setAttribute("aria-label", "Authorize: apply credentials"));
  };
  new MutationObserver(name).observe(root, { childList: true, subtree: true });
  name();
})();
