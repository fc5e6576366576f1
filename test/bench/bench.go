// Package bench holds what configstamp's load programs share (test/scale's benchmarks
// and test/soak): clients and objects built for load, a worker pool, and what they
// measure of a configstamp process (RSS, open files, its metrics) and of the API server
// (its audit log).
package bench
