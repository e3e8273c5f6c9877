//! Arguments from Python: vectorcall and tuple/dict arguments matched to parameter names
//! with CPython's own wording for mistakes, the checks each kind of argument gets, and the
//! short, never-failing reprs that error messages quote.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyString};

use crate::cpython::raw_call::{Fastcall, TupleDict};

/// A Python-visible signature: positional-or-keyword names, then keyword-only names.
pub struct Signature {
    pub name: &'static str,
    pub positional: &'static [&'static str],
    pub keyword_only: &'static [&'static str],
    pub required: usize,
}

pub type Args<'py, const N: usize> = [Option<Bound<'py, PyAny>>; N];

impl Signature {
    fn slot_of(&self, key: &str) -> Option<usize> {
        self.positional
            .iter()
            .chain(self.keyword_only.iter())
            .position(|n| *n == key)
    }

    fn place<'py, const N: usize>(
        &self,
        out: &mut Args<'py, N>,
        key: &Bound<'py, PyAny>,
        value: Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let key = key.cast::<PyString>()?;
        let key = key.to_str()?;
        match self.slot_of(key) {
            Some(i) if out[i].is_some() => Err(PyTypeError::new_err(format!(
                "{}() got multiple values for argument '{key}'",
                self.name
            ))),
            Some(i) => {
                out[i] = Some(value);
                Ok(())
            }
            None => Err(PyTypeError::new_err(format!(
                "{}() got an unexpected keyword argument '{key}'",
                self.name
            ))),
        }
    }

    fn positional_count_error(&self, given: usize) -> PyErr {
        let n = self.positional.len();
        let takes = match n {
            0 => "takes no positional arguments".to_owned(),
            1 => "takes 1 positional argument".to_owned(),
            n => format!("takes {n} positional arguments"),
        };
        let were = if given == 1 { "was" } else { "were" };
        PyTypeError::new_err(format!("{}() {takes} but {given} {were} given", self.name))
    }

    #[inline]
    fn finish<'py, const N: usize>(&self, out: Args<'py, N>) -> PyResult<Args<'py, N>> {
        debug_assert_eq!(N, self.positional.len() + self.keyword_only.len());
        match (0..self.required).find(|&i| out[i].is_none()) {
            Some(missing) => Err(self.missing_error(missing)),
            None => Ok(out),
        }
    }

    #[cold]
    fn missing_error(&self, missing: usize) -> PyErr {
        PyTypeError::new_err(format!(
            "{}() missing required argument '{}'",
            self.name, self.positional[missing]
        ))
    }

    /// Arguments of a METH_FASTCALL | METH_KEYWORDS call.
    pub fn parse_fastcall<'py, const N: usize>(&self, args: &Fastcall<'_, 'py>) -> PyResult<Args<'py, N>> {
        let nargs = args.positional().len();
        if nargs > self.positional.len() {
            return Err(self.positional_count_error(nargs));
        }
        let mut out: Args<'py, N> = std::array::from_fn(|_| None);
        for (slot, value) in out.iter_mut().zip(args.positional()) {
            *slot = Some(value.to_owned());
        }
        if args.has_keywords() {
            for (key, value) in args.keywords() {
                self.place(&mut out, &key, value)?;
            }
        }
        self.finish(out)
    }

    /// Arguments of a tp_new-style call (a tuple and a dict, either possibly absent).
    pub fn parse_tuple_dict<'py, const N: usize>(&self, args: &TupleDict<'_, 'py>) -> PyResult<Args<'py, N>> {
        let mut out: Args<'py, N> = std::array::from_fn(|_| None);
        if let Some(args) = args.args {
            if args.len() > self.positional.len() {
                return Err(self.positional_count_error(args.len()));
            }
            for (i, value) in args.iter().enumerate() {
                out[i] = Some(value);
            }
        }
        if let Some(kwargs) = args.kwargs {
            for (key, value) in kwargs.iter() {
                self.place(&mut out, &key, value)?;
            }
        }
        self.finish(out)
    }
}

/// An int for an error message: its repr, or its size when the repr would be long or is
/// refused (CPython limits int-to-decimal conversions to 4300 digits by default).
pub fn int_repr(v: &Bound<'_, PyAny>) -> String {
    match v.repr() {
        Ok(r) if r.len().is_ok_and(|n| n <= 40) => r.to_string(),
        _ => {
            let bits = v
                .call_method0("bit_length")
                .and_then(|b| b.extract::<u64>())
                .unwrap_or(0);
            let sign = if v.lt(0).unwrap_or(false) { "a negative" } else { "an" };
            format!("{sign} int of {bits} bits")
        }
    }
}

/// Any object for an error message: a short repr that cannot fail. A producer's value may
/// have a repr that raises, or is huge, and the message must still be the one raised.
pub fn short_repr(v: &Bound<'_, PyAny>) -> String {
    if v.is_instance_of::<PyInt>() {
        return int_repr(v);
    }
    match v.repr().and_then(|r| r.to_str().map(str::to_owned)) {
        Ok(r) if r.chars().count() <= 80 => r,
        Ok(r) => format!("{}...", r.chars().take(60).collect::<String>()),
        Err(_) => format!(
            "a {} object",
            v.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "<unknown type>".into())
        ),
    }
}

/// An int that is not a bool: True and False are ints to Python but never a handle, a
/// device or a priority.
pub fn is_int_not_bool(v: &Bound<'_, PyAny>) -> bool {
    v.is_exact_instance_of::<PyInt>() || (v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>())
}

/// A device ordinal argument: None, or an int (not a bool) in [0, 2**31).
pub fn device_arg(value: Option<&Bound<'_, PyAny>>, fname: &str) -> PyResult<Option<i32>> {
    let Some(v) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if !is_int_not_bool(v) {
        return Err(PyTypeError::new_err(format!(
            "{fname}() device must be an int device ordinal or None, got {}",
            v.get_type().name()?
        )));
    }
    match v.extract::<i64>() {
        Ok(d) if (0..=i32::MAX as i64).contains(&d) => Ok(Some(d as i32)),
        _ => Err(PyValueError::new_err(format!(
            "{fname}() device must be a non-negative device ordinal below 2**31, got {}",
            int_repr(v)
        ))),
    }
}

/// A flag argument that must be a real bool, so that a typo such as a string is not
/// silently taken as True.
#[inline]
pub fn bool_arg(value: Option<&Bound<'_, PyAny>>, fname: &str, pname: &str, default: bool) -> PyResult<bool> {
    match value {
        None => Ok(default),
        Some(v) => match v.cast::<PyBool>() {
            Ok(b) => Ok(b.is_true()),
            Err(_) => Err(bool_error(v, fname, pname)),
        },
    }
}

#[cold]
fn bool_error(v: &Bound<'_, PyAny>, fname: &str, pname: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "{fname}() {pname} must be True or False, got {}",
        v.get_type().name().map(|n| n.to_string()).unwrap_or_default()
    ))
}

/// An int argument (not a bool) that fits an i32.
pub fn i32_arg(value: Option<&Bound<'_, PyAny>>, fname: &str, pname: &str, default: i32) -> PyResult<i32> {
    let Some(v) = value else { return Ok(default) };
    if !is_int_not_bool(v) {
        return Err(PyTypeError::new_err(format!(
            "{fname}() {pname} must be an int, got {}",
            v.get_type().name()?
        )));
    }
    v.extract::<i32>().map_err(|_| {
        PyValueError::new_err(format!(
            "{fname}() {pname} {} is out of range: it must fit a 32-bit signed int",
            int_repr(v)
        ))
    })
}

/// One of `names`, given as a str: its index. `what` names the argument in the errors
/// ("Stream.sync_policy", "set_access_policy_window() hit"), which list the names.
pub fn choice_arg(v: &Bound<'_, PyAny>, what: &str, names: &[&str]) -> PyResult<usize> {
    let listed = || {
        let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
        match quoted.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    };
    let Ok(text) = v.cast::<PyString>() else {
        return Err(PyTypeError::new_err(format!(
            "{what} must be {}, got {}",
            listed(),
            v.get_type().name()?
        )));
    };
    let text = text.to_str()?;
    names
        .iter()
        .position(|n| *n == text)
        .ok_or_else(|| PyValueError::new_err(format!("{what} must be {}, got {}", listed(), short_repr(v))))
}

#[cfg(test)]
mod tests {
    use pyo3::types::{PyDict, PyTuple};

    use super::*;

    const SIG: Signature = Signature {
        name: "f",
        positional: &["handle", "device"],
        keyword_only: &["owner"],
        required: 1,
    };

    /// `f(*args, **kwargs)` parsed against SIG: each slot's repr, or the error's text.
    fn parse(
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> Result<Vec<String>, String> {
        let call = TupleDict {
            args: Some(args.as_borrowed()),
            kwargs: kwargs.map(|k| k.as_borrowed()),
        };
        match SIG.parse_tuple_dict::<3>(&call) {
            Ok(out) => Ok(out
                .iter()
                .map(|v| v.as_ref().map_or("-".to_owned(), |v| v.repr().unwrap().to_string()))
                .collect()),
            Err(e) => Err(format!("{}: {}", e.get_type(py).name().unwrap(), e.value(py))),
        }
    }

    fn with_python(f: impl for<'py> FnOnce(Python<'py>)) {
        Python::initialize();
        Python::attach(f);
    }

    #[test]
    fn arguments_go_to_their_slots_by_position_and_by_name() {
        with_python(|py| {
            let kw = PyDict::new(py);
            kw.set_item("owner", "o").unwrap();
            kw.set_item("device", 3).unwrap();
            let args = PyTuple::new(py, [7]).unwrap();
            assert_eq!(parse(py, &args, Some(&kw)).unwrap(), ["7", "3", "'o'"]);
            let none = PyTuple::empty(py);
            let kw = PyDict::new(py);
            kw.set_item("handle", 1).unwrap();
            assert_eq!(
                parse(py, &none, Some(&kw)).unwrap(),
                ["1", "-", "-"],
                "optional slots stay empty"
            );
            assert_eq!(
                parse(py, &PyTuple::new(py, [1, 2]).unwrap(), None).unwrap(),
                ["1", "2", "-"]
            );
        });
    }

    #[test]
    fn mistakes_get_cpythons_wording() {
        with_python(|py| {
            let none = PyTuple::empty(py);
            assert_eq!(
                parse(py, &none, None).unwrap_err(),
                "TypeError: f() missing required argument 'handle'"
            );
            let three = PyTuple::new(py, [1, 2, 3]).unwrap();
            assert_eq!(
                parse(py, &three, None).unwrap_err(),
                "TypeError: f() takes 2 positional arguments but 3 were given"
            );
            let kw = PyDict::new(py);
            kw.set_item("handle", 2).unwrap();
            assert_eq!(
                parse(py, &PyTuple::new(py, [1]).unwrap(), Some(&kw)).unwrap_err(),
                "TypeError: f() got multiple values for argument 'handle'"
            );
            let kw = PyDict::new(py);
            kw.set_item("devcie", 0).unwrap();
            assert_eq!(
                parse(py, &PyTuple::new(py, [1]).unwrap(), Some(&kw)).unwrap_err(),
                "TypeError: f() got an unexpected keyword argument 'devcie'"
            );
            let one = Signature {
                name: "g",
                positional: &["x"],
                keyword_only: &[],
                required: 0,
            };
            let err = one.positional_count_error(2);
            assert_eq!(
                err.value(py).to_string(),
                "g() takes 1 positional argument but 2 were given"
            );
            let zero = Signature {
                name: "h",
                positional: &[],
                keyword_only: &["x"],
                required: 0,
            };
            let err = zero.positional_count_error(1);
            assert_eq!(
                err.value(py).to_string(),
                "h() takes no positional arguments but 1 was given"
            );
        });
    }

    #[test]
    fn device_bool_and_int_arguments_are_checked() {
        with_python(|py| {
            let int = |v: i64| v.into_pyobject(py).unwrap().into_any();
            let big = py.eval(c"2**40", None, None).unwrap();
            let t = PyBool::new(py, true).to_owned().into_any();
            let s = "0".into_pyobject(py).unwrap().into_any();
            let none = py.None().into_bound(py);
            let msg = |e: PyErr| format!("{}: {}", e.get_type(py).name().unwrap(), e.value(py));

            assert_eq!(device_arg(None, "f").unwrap(), None);
            assert_eq!(device_arg(Some(&none), "f").unwrap(), None);
            assert_eq!(device_arg(Some(&int(2)), "f").unwrap(), Some(2));
            assert_eq!(
                msg(device_arg(Some(&t), "f").unwrap_err()),
                "TypeError: f() device must be an int device ordinal or None, got bool"
            );
            assert_eq!(
                msg(device_arg(Some(&int(-1)), "f").unwrap_err()),
                "ValueError: f() device must be a non-negative device ordinal below 2**31, got -1"
            );
            assert!(device_arg(Some(&big), "f").is_err());

            assert!(bool_arg(None, "f", "timing", true).unwrap());
            assert!(!bool_arg(Some(&PyBool::new(py, false).to_owned().into_any()), "f", "timing", true).unwrap());
            assert_eq!(
                msg(bool_arg(Some(&int(1)), "f", "timing", false).unwrap_err()),
                "TypeError: f() timing must be True or False, got int"
            );

            assert_eq!(i32_arg(None, "f", "priority", -1).unwrap(), -1);
            assert_eq!(i32_arg(Some(&int(-5)), "f", "priority", 0).unwrap(), -5);
            assert_eq!(
                msg(i32_arg(Some(&s), "f", "priority", 0).unwrap_err()),
                "TypeError: f() priority must be an int, got str"
            );
            assert_eq!(
                msg(i32_arg(Some(&big), "f", "priority", 0).unwrap_err()),
                "ValueError: f() priority 1099511627776 is out of range: it must fit a 32-bit signed int"
            );
        });
    }

    #[test]
    fn reprs_for_messages_are_short_and_never_fail() {
        with_python(|py| {
            let huge = py.eval(c"-(10**100)", None, None).unwrap();
            assert_eq!(int_repr(&huge), "a negative int of 333 bits");
            assert_eq!(int_repr(&7i64.into_pyobject(py).unwrap().into_any()), "7");
            let long = "x".repeat(200).into_pyobject(py).unwrap().into_any();
            let r = short_repr(&long);
            assert!(
                r.starts_with("'xxx") && r.ends_with("...") && r.chars().count() == 63,
                "{r}"
            );
            let bad = py.eval(c"type('Bad', (), {'__repr__': lambda self: 1 / 0})()", None, None);
            assert_eq!(short_repr(&bad.unwrap()), "a Bad object");
            assert!(is_int_not_bool(&huge));
            assert!(!is_int_not_bool(&PyBool::new(py, true).to_owned().into_any()));
        });
    }
}
