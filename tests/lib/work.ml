(* work.ml — shared by the tests/lib programs: integer hashing in chunks
   until the process has used [until] seconds of CPU (Sys.time), so a phase's
   length does not depend on the machine's speed. Never inlined, so callers
   keep their own frame when they do not tail-call it. *)

let[@inline never] burn until =
  let acc = ref 1 in
  while Sys.time () < until do
    for i = 1 to 200_000 do
      acc := (!acc * 31 + i) land 0xffffff
    done
  done;
  !acc
