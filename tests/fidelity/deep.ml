(* tests/fidelity/deep.ml — non-tail recursion 20,000 frames deep with all
   the CPU spent at the bottom. Checked by test_fidelity.py: stacks reach _start and
   hold every one of the 20,001 frames of [descend].
   Usage: deep.exe [SCALE] [DEPTH]  (SCALE multiplies the amount of work) *)

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let scaled n = max 1 (int_of_float (scale *. float_of_int n))
let depth = if Array.length Sys.argv > 2 then int_of_string Sys.argv.(2) else 20_000

(* A fixed amount of work; the loop body calls nothing, so the leaf of
   every sample taken here is [burn]. *)
let[@inline never] burn () =
  let acc = ref 0 in
  for _ = 1 to scaled 18_000 do
    for i = 1 to 200_000 do
      acc := !acc + (i land 7)
    done
  done;
  Sys.opaque_identity !acc

(* [1 + descend (n - 1)] keeps every level on the stack; the [burn] call
   is not in tail position either, so level 0 stays too. *)
let rec descend n =
  if n = 0 then
    let r = burn () in
    r + 1
  else 1 + descend (n - 1)

let () =
  let r = descend depth in
  Printf.printf "deep: depth %d result %d cpu %.3f\n" depth r (Sys.time ())
