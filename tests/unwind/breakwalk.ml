(* tests/unwind/breakwalk.ml — an OCaml loop that spends part of its time in
   C stubs that leave garbage in rbp and have no unwind information
   (breakwalk_stubs.c), the rest in ordinary OCaml. The profile must mark
   every stack that does not reach its thread's root as [broken] (or
   [truncated]), and only those.
   Usage: breakwalk.exe [SCALE] *)

external spin_fake : int -> unit = "brk_spin_fake" [@@noalloc]
external spin_zero : int -> unit = "brk_spin_zero" [@@noalloc]
external spin_junk : int -> unit = "brk_spin_junk" [@@noalloc]

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let rounds = max 1 (int_of_float (scale *. 200.))

let[@inline never] rec plain n acc = if n = 0 then acc else plain (n - 1) ((acc * 13 + n) land 0xfffff)

let[@inline never] in_fake () = spin_fake 1_000_000
let[@inline never] in_zero () = spin_zero 1_000_000
let[@inline never] in_junk () = spin_junk 1_000_000

let () =
  let acc = ref 0 in
  for _ = 1 to rounds do
    in_fake (); in_zero (); in_junk ();
    acc := !acc + plain 1_500_000 1
  done;
  Printf.printf "breakwalk: %d\n" (!acc land 0xffff)
