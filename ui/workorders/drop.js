// Dropping a message file on the Work orders page's input card.
//
// The card shows it will take the file (class wo-drag) and hands the dropped files on. The
// rest of the window refuses dropped files: a browser opens a file dropped anywhere else in
// the tab, which would leave the page and lose the draft and the result. Drags of text (not
// files) are left alone everywhere, so text can still be dragged into the text box.

const hasFiles = (e) => [...(e.dataTransfer?.types || [])].includes("Files");

/** Make `zone` take dropped files: onFiles(FileList) when at least one is dropped. Returns stop(). */
export function acceptFiles(zone, onFiles) {
  zone.addEventListener("dragover", (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = "copy";
    zone.classList.add("wo-drag");
  });
  zone.addEventListener("dragleave", (e) => {
    if (!zone.contains(e.relatedTarget)) zone.classList.remove("wo-drag");
  });
  zone.addEventListener("drop", (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    zone.classList.remove("wo-drag");
    const files = e.dataTransfer.files;
    if (files.length) onFiles(files);
  });
  const guard = (e) => {
    if (hasFiles(e) && !zone.contains(e.target)) e.preventDefault();
  };
  window.addEventListener("dragover", guard);
  window.addEventListener("drop", guard);
  return () => {
    window.removeEventListener("dragover", guard);
    window.removeEventListener("drop", guard);
  };
}
