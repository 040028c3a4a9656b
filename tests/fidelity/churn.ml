(* tests/fidelity/churn.ml — domains spawned and joined in a loop: hundreds
   of short-lived domains, two at a time, each computing for a few
   milliseconds. Checked by test_fidelity.py: stacks reach their thread's root and no
   sample is lost while threads come and go.
   Usage: churn.exe [SCALE]  (SCALE multiplies the amount of work; default 1) *)

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let scaled n = max 1 (int_of_float (scale *. float_of_int n))
let rounds = scaled 200

let[@inline never] work seed =
  let acc = ref seed in
  for i = 1 to 3_000_000 do
    acc := (!acc * 13) + i
  done;
  !acc

let () =
  let total = ref 0 in
  for r = 1 to rounds do
    let ds = List.init 2 (fun i -> Domain.spawn (fun () -> work (r + i))) in
    List.iter (fun d -> total := !total + Domain.join d) ds
  done;
  Printf.printf "churn: %d domains spawned, checksum %d, cpu %.3f\n" (2 * rounds)
    (!total land 0xffff) (Sys.time ())
