// Package sink renders reports for people and programs: the grouped table
// the scan prints by default, and JSON or YAML with one object per report.
// It formats what it is given and never filters or judges findings.
package sink
