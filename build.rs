// pyo3's cfgs for this build (Py_GIL_DISABLED, Py_3_*): what the interpreter guarantees
// decides which uses of a Stream may go without the state word's marks (src/stream/methods.rs).
fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
