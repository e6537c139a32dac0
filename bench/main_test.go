package main

import (
	"slices"
	"testing"
)

func TestChooseRows(t *testing.T) {
	impls := []impl{{name: nameRaw}, {name: nameSetNX}, {name: nameFenced}, {name: nameRL}, {name: nameRLAlone}, {name: nameBSM}}
	names := func(rows string) []string {
		t.Helper()
		kept, err := chooseRows(slices.Clone(impls), rows)
		if err != nil {
			t.Fatalf("chooseRows(%q): %v", rows, err)
		}
		var out []string
		for _, im := range kept {
			out = append(out, im.name)
		}
		return out
	}
	for rows, want := range map[string][]string{
		"":                  {nameRaw, nameSetNX, nameFenced, nameRL, nameRLAlone, nameBSM},
		"SET NX":            {nameSetNX, nameFenced},         // a part of two names
		"redlease":          {nameRL},                        // an exact name, not every name that contains it
		"bsm,by hand":       {nameRaw, nameBSM},              // in the part's order, not the list's
		"SET NX,,redlease,": {nameSetNX, nameFenced, nameRL}, // empty strings pick nothing
	} {
		if got := names(rows); !slices.Equal(got, want) {
			t.Errorf("chooseRows(%q) = %q, want %q", rows, got, want)
		}
	}
	if _, err := chooseRows(impls, "no such row"); err == nil {
		t.Error("chooseRows with a string that matches nothing: no error")
	}
}
