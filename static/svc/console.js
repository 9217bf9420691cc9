// The console's one behaviour of its own, served from static/ (the Content-Security-Policy
// runs no inline script): a "Copy" button (licensing.admin.display.copyable) copies the
// text of the box its data-copy attribute names, then says so.
document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const box = document.getElementById(button.dataset.copy);
  if (!box) return;
  box.select();
  if (navigator.clipboard) {
    navigator.clipboard.writeText(box.value).catch(() => document.execCommand("copy"));
  } else {
    document.execCommand("copy");
  }
  button.textContent = "Copied";
});
