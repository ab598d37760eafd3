// Small checks the Node modules share (not an export of the package: package.json names no `./shared`).

/** A plain object: not null, not an array. */
export const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/** `v` when it is a positive, finite number of seconds; else a TypeError naming the option. */
export function positive(v, name) {
  if (typeof v !== 'number' || !(v > 0) || !Number.isFinite(v)) throw new TypeError(`\`${name}\` must be a positive number of seconds`);
  return v;
}
