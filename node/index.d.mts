// Types of @phase-console/fleet-console for import: the same declarations as require()'s
// (index.d.cts), since src/index.mjs hands out the very objects of src/index.cjs.
export * from "./index.cjs";
