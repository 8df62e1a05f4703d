// Mermaid diagrams under the page's Content-Security-Policy. Mermaid (shipped in ./vendor)
// lays a diagram out in a frame of this origin (mermaid-frame.html), where its inline styles
// are allowed, and the SVG is parsed there too; the page takes it without them: the SVG's style element becomes a
// constructed stylesheet and its style attributes element.style, through the CSS object model,
// which the page's policy allows. Diagram text is untrusted (a model wrote it): Mermaid's
// strict security level escapes labels and drops click handlers and scripts.

let frame = null;

function layoutFrame() {
  frame ??= new Promise((resolve, reject) => {
    const el = document.createElement("iframe");
    el.src = "/ui/static/mermaid-frame.html";
    el.className = "layout-frame";
    el.title = "diagram layout (not shown)";
    el.setAttribute("aria-hidden", "true");
    el.tabIndex = -1;
    el.addEventListener("load", () => (el.contentWindow.frameReady
      ? resolve(el.contentWindow) : reject(new Error("the Mermaid renderer did not load"))));
    document.body.append(el);
  });
  return frame;
}

/** The parsed SVG's styles taken out before it joins the page (the page's policy refuses
 * them as markup): its style elements' text, and each styled element's style, in order. */
function takeStyles(parsed) {
  const sheets = [...parsed.querySelectorAll("style")].map((style) => {
    style.remove();
    return style.textContent;
  });
  const styled = [...parsed.querySelectorAll("[style]")].map((el) => {
    const text = el.getAttribute("style");
    el.removeAttribute("style");
    el.setAttribute("data-styled", "");
    return text;
  });
  return { sheets, styled };
}

/** Give the imported SVG its styles back through the CSS object model. */
function restoreStyles(svg, { sheets, styled }) {
  for (const text of sheets) {
    const sheet = new CSSStyleSheet();
    sheet.replaceSync(text);
    document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
  }
  svg.querySelectorAll("[data-styled]").forEach((el, i) => {
    el.style.cssText = styled[i];
    el.removeAttribute("data-styled");
  });
}

let counter = 0;

/** The diagram `source` as an SVG element of this page, labelled `label`. */
export async function render(source, label) {
  const inFrame = await layoutFrame();
  counter += 1;
  const { svg } = await inFrame.mermaid.render(`diagram-${counter}`, source);
  // Parsed in the frame: a document parsed here would be held to this page's policy.
  const parsed = new inFrame.DOMParser().parseFromString(svg, "image/svg+xml");
  if (parsed.querySelector("parsererror")) throw new Error("Mermaid's SVG does not parse");
  const styles = takeStyles(parsed.documentElement);
  const element = document.importNode(parsed.documentElement, true);
  restoreStyles(element, styles);
  element.setAttribute("role", "img");
  element.setAttribute("aria-label", label);
  return element;
}

/** The flowchart nodes of a rendered diagram, with their Mermaid ids. */
export function nodes(svg) {
  return [...svg.querySelectorAll("g.node")].map((g) => ({
    element: g,
    id: g.dataset.id || (g.id.match(/flowchart-(.+)-\d+$/) || [])[1] || g.id,
  }));
}
