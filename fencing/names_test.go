package fencing

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
)

// Every guard takes every name a lease can have, a permit's key included,
// and refuses the names no lease has, before any statement or round trip.
func TestGuardsTakeTheNamesOfLeases(t *testing.T) {
	longest := strings.Repeat("r", redlease.MaxResourceName) + "#1048575" // the longest key of a permit
	require.NoError(t, checkResource(longest))
	for _, bad := range []string{longest + "x", "a\x00b", "\xff\xfe", ""} {
		require.ErrorIs(t, checkResource(bad), redlease.ErrInvalidArgument, "%q", bad)
		_, err := (&MemoryStore{}).Admit(t.Context(), bad, 1, "o")
		require.ErrorIs(t, err, redlease.ErrInvalidArgument)
	}

	handled := false
	guard := HTTPGuard{Store: &MemoryStore{}}.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { handled = true }))
	for _, tc := range []struct {
		resource string
		status   int
	}{{longest, http.StatusOK}, {"a\x00b", http.StatusBadRequest}, {"\xff\xfe", http.StatusBadRequest},
		{longest + "x", http.StatusBadRequest}} {
		handled = false
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header.Set(HeaderFencingToken, "7")
		req.Header.Set(HeaderFencingOwner, "o")
		req.Header[HeaderFencingResource] = []string{tc.resource} // as a client that does not check would send it
		rec := httptest.NewRecorder()
		guard.ServeHTTP(rec, req)
		require.Equal(t, tc.status, rec.Code, "%.20q: %s", tc.resource, rec.Body)
		require.Equal(t, tc.status == http.StatusOK, handled)
	}
}
