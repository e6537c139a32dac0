//go:build !linux

package main

import "errors"

func pin() error { return errors.New("-pin: only on Linux") }

func pinServer(int) error { return errors.New("-pin: only on Linux") }

func checkPinned(int) error { return errors.New("-pin: only on Linux") }
