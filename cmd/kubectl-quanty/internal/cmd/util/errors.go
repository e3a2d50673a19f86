package util

// ExitError ends a command with an exit status other than its failure's
// (1, or 2 for diff), and a message or none: diff's differences are 1,
// and print nothing more.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return ""
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// ErrorStatusAnnotation is the annotation of a command whose errors exit
// with a status other than 1: diff's 2, as kubectl diff's, since its 1
// says that the objects differ. A wrong flag is an error too.
const ErrorStatusAnnotation = "kubectl-quanty/error-status"

// Dash is s, or "-" for empty.
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
