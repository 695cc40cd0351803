package wire

// The names of the failed outcomes, as the CLI's --json answers spell them
// ({"error": NAME, "message": ...}) and as the HTTP/JSON API answers them:
// one list, so a script reads the same word from either.
const (
	ErrorNameHeld             = "held"
	ErrorNameNotFound         = "not-found" // the key is not held, or not with this token
	ErrorNameOutcomeUnknown   = "outcome-unknown"
	ErrorNameInvalidArgument  = "invalid-argument"
	ErrorNamePermissionDenied = "permission-denied"
	ErrorNameUnavailable      = "unavailable"
	ErrorNameOverloaded       = "overloaded"
	ErrorNameCompacted        = "compacted" // a watch's revision is no longer held
	ErrorNameError            = "error"     // anything else
)

// ErrorName is the name of the failed outcome an answer op reports, ""
// for an answer that is no failure (or a redirect, which is neither).
func ErrorName(op Op) string {
	switch op {
	case OpHeld:
		return ErrorNameHeld
	case OpNotFound:
		return ErrorNameNotFound
	case OpOutcomeUnknown:
		return ErrorNameOutcomeUnknown
	case OpInvalidArgument:
		return ErrorNameInvalidArgument
	case OpPermissionDenied:
		return ErrorNamePermissionDenied
	case OpUnavailable:
		return ErrorNameUnavailable
	case OpOverloaded:
		return ErrorNameOverloaded
	case OpCompacted:
		return ErrorNameCompacted
	case OpError:
		return ErrorNameError
	}
	return ""
}
