// schema.js - checks modified arguments against a tool's params schema in
// the browser, before they are sent. The common JSON Schema keywords only:
// the server's pipeline validates them again in full (and gates them again)
// whatever this says.

function typeOf(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v; // string, boolean, object
}

function typeOk(want, v) {
  const t = typeOf(v);
  return want === t || (want === "number" && t === "integer");
}

// Returns a list of "path: problem" strings; empty when v fits s.
export function validate(s, v, path = "$", out = []) {
  if (s === true || s === undefined || s === null) return out;
  if (s === false) { out.push(`${path}: not allowed`); return out; }
  if (s.type !== undefined) {
    const types = Array.isArray(s.type) ? s.type : [s.type];
    if (!types.some((t) => typeOk(t, v))) {
      out.push(`${path}: must be ${types.join(" or ")}, not ${typeOf(v)}`);
      return out;
    }
  }
  if (s.enum && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v)))
    out.push(`${path}: must be one of ${s.enum.map((e) => JSON.stringify(e)).join(", ")}`);
  if ("const" in s && JSON.stringify(s.const) !== JSON.stringify(v))
    out.push(`${path}: must be ${JSON.stringify(s.const)}`);
  if (typeof v === "string") {
    const n = [...v].length;
    if (s.minLength !== undefined && n < s.minLength) out.push(`${path}: shorter than ${s.minLength}`);
    if (s.maxLength !== undefined && n > s.maxLength) out.push(`${path}: longer than ${s.maxLength}`);
    if (s.pattern !== undefined) {
      try { if (!new RegExp(s.pattern, "u").test(v)) out.push(`${path}: does not match ${s.pattern}`); } catch (_) { /* the server decides */ }
    }
  }
  if (typeof v === "number") {
    if (s.minimum !== undefined && v < s.minimum) out.push(`${path}: below ${s.minimum}`);
    if (s.maximum !== undefined && v > s.maximum) out.push(`${path}: above ${s.maximum}`);
    if (s.exclusiveMinimum !== undefined && v <= s.exclusiveMinimum) out.push(`${path}: must be above ${s.exclusiveMinimum}`);
    if (s.exclusiveMaximum !== undefined && v >= s.exclusiveMaximum) out.push(`${path}: must be below ${s.exclusiveMaximum}`);
  }
  if (Array.isArray(v)) {
    if (s.minItems !== undefined && v.length < s.minItems) out.push(`${path}: fewer than ${s.minItems} items`);
    if (s.maxItems !== undefined && v.length > s.maxItems) out.push(`${path}: more than ${s.maxItems} items`);
    if (s.items && typeof s.items === "object" && !Array.isArray(s.items))
      v.forEach((x, i) => validate(s.items, x, `${path}[${i}]`, out));
  }
  if (typeOf(v) === "object") {
    const props = s.properties || {};
    for (const k of s.required || []) if (!(k in v)) out.push(`${path}: missing required "${k}"`);
    for (const [k, x] of Object.entries(v)) {
      if (k in props) validate(props[k], x, `${path}.${k}`, out);
      else if (s.additionalProperties === false) out.push(`${path}: unknown property "${k}"`);
      else if (typeof s.additionalProperties === "object") validate(s.additionalProperties, x, `${path}.${k}`, out);
    }
  }
  for (const sub of s.allOf || []) validate(sub, v, path, out);
  return out;
}
