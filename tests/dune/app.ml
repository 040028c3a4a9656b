(* app.ml — a program that profiles part of itself with the flamme library:
   [work] (recursive fib, all of its time in App.fib) runs under
   Flamme.with_profile, which writes app.flm in the current directory.
   Built through dune by tests/dune/test_dune.py and against the installed
   library by tests/install/test_install.py. *)
let[@inline never] rec fib n = if n < 2 then n else fib (n - 1) + fib (n - 2)

let[@inline never] work () =
  let s = ref 0 in
  for _ = 1 to 16 do s := !s + fib 33 done;
  !s

let () =
  let r = Flamme.with_profile ~hz:499 ~output:"app.flm" work in
  Printf.printf "work=%d\n" r
