package archive

import (
	"context"
	"errors"
	"net"
	"syscall"

	"github.com/minio/minio-go/v7"
)

// Code is the failure class a job reports as CODEHUB_ERROR; the controller
// maps it to an error reason and decides whether to retry.
type Code string

// Failure classes, shared with the controller through job output.
const (
	CodeS3Access         Code = "S3_ACCESS_ERROR"
	CodeArchiveNotFound  Code = "ARCHIVE_NOT_FOUND"
	CodeMetaNotFound     Code = "META_NOT_FOUND"
	CodeChecksumMismatch Code = "CHECKSUM_MISMATCH"
	CodeTarExtractFailed Code = "TAR_EXTRACT_FAILED"
	CodeDiskFull         Code = "DISK_FULL"
	CodeUnknown          Code = "UNKNOWN"
	// CodeBuildFailed: a prebuild's clone or init failed, before anything
	// was archived.
	CodeBuildFailed Code = "BUILD_FAILED"
)

// Error carries the failure class of an archive operation.
type Error struct {
	Code Code
	Err  error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches a sentinel (an Error without Err) of the same code, so
// errors.Is(err, ErrArchiveNotFound) holds for every archive-not-found error.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Err == nil && t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	ErrArchiveNotFound  = &Error{Code: CodeArchiveNotFound}
	ErrMetaNotFound     = &Error{Code: CodeMetaNotFound}
	ErrChecksumMismatch = &Error{Code: CodeChecksumMismatch}
)

func withCode(code Code, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}

// CodeOf classifies err: the code attached where the failure was understood
// wins; otherwise a full disk, an S3 error response or a network failure is
// recognised by type; anything else, cancellation included, is UNKNOWN.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	if ae, ok := errors.AsType[*Error](err); ok {
		return ae.Code
	}
	if errors.Is(err, context.Canceled) {
		return CodeUnknown
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return CodeDiskFull
	}
	if _, ok := errors.AsType[minio.ErrorResponse](err); ok {
		return CodeS3Access
	}
	if ne, ok := errors.AsType[net.Error](err); ok {
		// syscall.Errno has Timeout and Temporary as well: a local file
		// error would otherwise pass for a network failure.
		if _, local := ne.(syscall.Errno); !local {
			return CodeS3Access
		}
	}
	return CodeUnknown
}

// s3Error classifies an error returned by an S3 call on an object: a missing
// object becomes notFound, every other S3 or transport failure
// S3_ACCESS_ERROR. Local failures (a full disk feeding an upload) keep their
// own class.
func s3Error(err error, notFound Code) error {
	if err == nil {
		return nil
	}
	if _, coded := errors.AsType[*Error](err); coded {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return withCode(CodeUnknown, err)
	}
	if resp, ok := errors.AsType[minio.ErrorResponse](err); ok && resp.Code == minio.NoSuchKey {
		return withCode(notFound, err)
	}
	if code := CodeOf(err); code != CodeUnknown {
		return withCode(code, err)
	}
	return withCode(CodeS3Access, err)
}
