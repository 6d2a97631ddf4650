/** Just enough XML writing for the AWS Query and EC2 protocols: escaped text in nested elements. */

/** Escapes text for an XML element body or attribute. */
export function escapeXml(text: string): string {
  return text.replace(
    /[<>&'"]/g,
    (c) => `&${{ '<': 'lt', '>': 'gt', '&': 'amp', "'": 'apos', '"': 'quot' }[c]};`,
  );
}

/** An element with escaped text, or nothing when the value is absent (AWS omits unset fields). */
export function el(name: string, value: string | number | boolean | undefined): string {
  if (value === undefined) return '';
  return `<${name}>${escapeXml(String(value))}</${name}>`;
}

/** An element around already-rendered children. */
export function wrap(name: string, children: string): string {
  return `<${name}>${children}</${name}>`;
}

/** A list of items each in its own `<item>` or `<member>` element, as the protocol names them. */
export function list<T>(
  name: string,
  itemName: 'item' | 'member',
  items: readonly T[],
  render: (item: T) => string,
) {
  if (items.length === 0) return `<${name}/>`;
  return wrap(name, items.map((i) => wrap(itemName, render(i))).join(''));
}

/** A complete document with the XML declaration. */
export function document(root: string, namespace: string, children: string): string {
  return `<?xml version="1.0" encoding="UTF-8"?>\n<${root} xmlns="${namespace}">${children}</${root}>`;
}
