package controllers_test

import "fmt"

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
