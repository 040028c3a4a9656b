(* basic.ml — torture baseline: CPU work, a file written, output printed.
   Usage: basic.exe  (writes out.txt in the current directory) *)
let[@inline never] work n =
  let acc = ref 7 in
  for i = 1 to n do acc := (!acc * 31 + i) land 0xffffff done;
  !acc

let () =
  let oc = open_out "out.txt" in
  for r = 1 to 5 do
    let v = work 20_000_000 in
    Printf.fprintf oc "round %d: %d\n%!" r v;
    Printf.printf "round %d\n%!" r
  done;
  close_out oc
