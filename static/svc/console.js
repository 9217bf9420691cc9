// The console's and the portal's one behaviour of their own, served from static/ (the
// Content-Security-Policy runs no inline script): a "Copy" button copies the text of the
// element its data-copy attribute names (a read-only box, a key shown once, a list of
// recovery codes), then says so. The buttons start hidden: without script the secret is
// still there to select by hand, and no button that does nothing is shown.
document.addEventListener("DOMContentLoaded", () => {
  for (const button of document.querySelectorAll("button[data-copy][hidden]")) {
    button.hidden = false;
  }
});

document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const box = document.getElementById(button.dataset.copy);
  if (!box) return;
  let text;
  if ("value" in box && typeof box.select === "function") {
    box.select();
    text = box.value;
  } else {
    const range = document.createRange();
    range.selectNodeContents(box);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    text = box.innerText.trim();
  }
  const done = () => { button.textContent = "Copied"; };
  if (navigator.clipboard) {
    navigator.clipboard.writeText(text).then(done, () => {
      if (document.execCommand("copy")) done();
    });
  } else if (document.execCommand("copy")) {
    done();
  }
});
