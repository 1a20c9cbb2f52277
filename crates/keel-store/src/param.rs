//! The values a [`crate::batch::Batch`] binds: what each Rust type becomes in SQLite.

use rusqlite::types::Value;

/// A value a batch binds, as SQLite will store it. An owned string moves in; a borrowed one is
/// copied once, without checking again that it is UTF-8 (going through rusqlite's `ToSql`, every
/// text was checked and copied, and an owned one copied a second time).
pub(crate) trait Param {
    /// The value to bind.
    fn into_value(self) -> Value;
}

impl Param for String {
    fn into_value(self) -> Value {
        Value::Text(self)
    }
}

impl Param for &str {
    fn into_value(self) -> Value {
        Value::Text(self.to_owned())
    }
}

impl Param for &String {
    fn into_value(self) -> Value {
        Value::Text(self.clone())
    }
}

impl Param for i64 {
    fn into_value(self) -> Value {
        Value::Integer(self)
    }
}

impl Param for bool {
    fn into_value(self) -> Value {
        Value::Integer(i64::from(self))
    }
}

impl Param for f64 {
    fn into_value(self) -> Value {
        Value::Real(self)
    }
}

impl Param for Vec<u8> {
    fn into_value(self) -> Value {
        Value::Blob(self)
    }
}

impl Param for &[u8] {
    fn into_value(self) -> Value {
        Value::Blob(self.to_vec())
    }
}

impl<T: Param> Param for Option<T> {
    fn into_value(self) -> Value {
        self.map_or(Value::Null, Param::into_value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owned_string_moves_in_and_the_rest_become_what_sqlite_stores() {
        let text = String::from("a commit's events, one per line");
        let buffer = text.as_ptr();
        match text.into_value() {
            Value::Text(bound) => assert_eq!(bound.as_ptr(), buffer, "moved, not copied"),
            other => panic!("{other:?}"),
        }
        assert_eq!("borrowed".into_value(), Value::Text("borrowed".into()));
        assert_eq!(true.into_value(), Value::Integer(1));
        assert_eq!(7_i64.into_value(), Value::Integer(7));
        assert_eq!(0.5_f64.into_value(), Value::Real(0.5));
        assert_eq!(None::<&str>.into_value(), Value::Null);
        assert_eq!(Some(vec![1_u8, 2]).into_value(), Value::Blob(vec![1, 2]));
    }
}
