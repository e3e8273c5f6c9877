// pyo3's cfgs for this build (Py_3_12, Py_GIL_DISABLED, ...): which error-state API the
// interpreter offers.
fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
