package port

// CheckNoLostWakeups lets the external tests run the check on
// porttest.Pipe, which this package's own tests cannot import.
var CheckNoLostWakeups = checkNoLostWakeups
