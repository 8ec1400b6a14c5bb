//! Tests of `explain` and the waiting reasons: every node gets a verdict, and the reasons
//! name the dimension.
