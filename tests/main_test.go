package tests

import (
	"testing"

	"github.com/redlease/redlease/internal/servertest"
)

func TestMain(m *testing.M) { servertest.Main(m) }
