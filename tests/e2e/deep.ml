(* deep.ml — e2e program: non-tail recursion [depth] frames deep (default
   6000) with all the CPU spent at the bottom, so every sample's stack holds
   thousands of [descend] frames above [main]. The checker asserts that the
   profiler keeps them all (no cut at a small fixed depth).
   Usage: deep.exe [PERCENT] [DEPTH]  (default 100 = ~3 s, 6000) *)

let[@inline never] bottom n =
  let acc = ref 3 in
  for i = 1 to n do
    acc := (!acc * 1103515245 + i) land 0x3fffffff
  done;
  !acc

(* [1 + descend ...] keeps the call out of tail position: one frame per level. *)
let[@inline never] rec descend depth n =
  if depth = 0 then bottom n else 1 + descend (depth - 1) n

let () =
  let percent = if Array.length Sys.argv > 1 then int_of_string Sys.argv.(1) else 100 in
  let depth = if Array.length Sys.argv > 2 then int_of_string Sys.argv.(2) else 6000 in
  let r = ref 0 in
  for _ = 1 to 10 do
    r := (!r + descend depth (240_000_000 * percent / 100)) land 0xffffff
  done;
  Printf.printf "deep: depth=%d result=%d\n" depth !r
