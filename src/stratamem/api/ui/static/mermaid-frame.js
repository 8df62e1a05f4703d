// Inside the layout frame: set Mermaid up; the page calls window.mermaid.render here.
window.mermaid.initialize({ startOnLoad: false, securityLevel: "strict", theme: "neutral" });
window.frameReady = true;
