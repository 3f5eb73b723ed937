// Package layout holds the check that the module's rooms import only what
// the README's layout table says they may: the table is the rule, and
// this test keeps it true.
package layout
