// Small DOM helpers shared by the page scripts (one definition; the
// assets are embedded as they are, with no build step to bundle them).

export const $ = (sel) => document.querySelector(sel);

// el makes an element with an optional class and text. Text goes in as
// textContent, never markup, so what a machine or person wrote cannot
// become HTML.
export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
